"""The calibrated cost model: non-negative relative least squares, the roofline knee, and a
parametric model that recovers the work terms a grid was generated from."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from simtoys import TOY_PROFILE, toy_model

from sim.cost import CostModel, attention_work
from sim.fit import fit_knee, fit_linear, nnls_relative
from sim.hardware.profile import load_profile


def test_nnls_is_exact_on_model_data_and_never_negative():
    rng = np.random.default_rng(0)
    a = np.column_stack([np.ones(12), rng.uniform(1, 100, 12), rng.uniform(1, 1e4, 12)])
    y = a @ np.array([2e-5, 1e-6, 3e-8])
    assert nnls_relative(a, y) == pytest.approx([2e-5, 1e-6, 3e-8], rel=1e-9)
    # data that a negative coefficient would fit better: the fit stays >= 0
    y2 = a @ np.array([5e-5, 1e-6, 0.0]) - a[:, 2] * 1e-9
    assert (nnls_relative(a, y2) >= 0).all()


def test_the_knee_is_found_where_a_flat_floor_meets_the_line():
    xs = [1, 2, 4, 8, 16, 64, 256]
    ys = [1e-4 + max(x, 8) * 1e-5 for x in xs]  # flat below 8 tokens
    rows = [[1.0, x] for x in xs]
    fit = fit_knee(("1", "tokens"), rows, ys)
    assert fit.knee == 8 and max(abs(r) for r in fit.residuals(rows, ys)) < 1e-9
    plain = fit_linear(("1", "tokens"), rows, ys)
    assert max(abs(r) for r in plain.residuals(rows, ys)) > 0.05  # a line cannot


def _profile_from(layer) -> dict:  # noqa: ANN001 - layer(prefills, decodes) -> seconds
    pre = [(b, n, c) for n in (16, 64, 256) for c in (0, 128, 512) for b in (1,)] + [
        (2, 64, 0), (4, 32, 128)]
    dec = [(b, 1, c) for b in (1, 4, 16) for c in (32, 256)]
    grid = {"attention": "padded",
            "prefill": [[b, n, c, layer([(n, c)] * b, [])] for b, n, c in pre],
            "decode": [[b, 1, c, layer([], [c] * b)] for b, _, c in dec]}
    data = copy.deepcopy(TOY_PROFILE)
    data["calibrated"] = {"device": "cpu", "compute": grid}
    return data


def true_layer(prefills, decodes):  # a made-up runtime: 40 us + tokens + padded attention
    keys, pairs = attention_work(prefills, decodes, "padded")
    tokens = sum(n for n, _ in prefills) + len(decodes)
    return 4e-5 + 2e-7 * tokens + 3e-9 * keys + (1e-10 * pairs if prefills else 0.0)


def test_the_fitted_model_recovers_held_out_batches_and_ablation_drops_context():
    cost = CostModel(load_profile(_profile_from(true_layer)), toy_model())
    for prefills, decodes in [([(100, 300)], []), ([(40, 0), (90, 700)], []),
                              ([], [500, 20, 333]), ([], [2000] * 7)]:
        assert cost.layer_time("full", prefills, decodes) == pytest.approx(
            true_layer(prefills, decodes), rel=1e-6)
    data = _profile_from(true_layer)
    data["ablate"] = ["context"]
    blind = CostModel(load_profile(data), toy_model())
    long, short = blind.layer_time("full", [], [4000]), blind.layer_time("full", [], [10])
    assert long == short  # no context term left


def test_in_situ_terms_scale_layers_and_add_to_the_first_op():
    data = _profile_from(true_layer)
    data["calibrated"]["in_situ"] = {"compute_scale": 1.5, "first_op_s": 1e-4,
                                     "sample_scale": 1.0, "setup_s": 0.0}
    cost = CostModel(load_profile(data), toy_model())
    times = cost.batch_layer_times([(64, 0)], [])
    assert times[1] == pytest.approx(1.5 * true_layer([(64, 0)], []), rel=1e-6)
    assert times[0] == pytest.approx(times[1] + 1e-4, rel=1e-6)


def test_the_analytic_lm_head_needs_a_vocabulary():
    from simtoys import toy_profile

    none = CostModel(toy_profile(), toy_model())
    assert none.sample_time(8) == 0.0
    with_vocab = CostModel(toy_profile(), toy_model(vocab_size=32000))
    # 8 x 1024 x 32000 x 2 flops vs 64 MB of weights: memory-bound at 2 TB/s
    assert with_vocab.sample_time(8) == pytest.approx(
        (1024 * 32000 + 8 * (1024 + 32000)) * 2 / 2.0e12, rel=1e-9)


def test_a_bad_grid_row_names_the_key():
    data = _profile_from(true_layer)
    data["calibrated"]["compute"]["decode"][0] = [1, 1, 32]
    with pytest.raises(ValueError, match="calibrated.compute.decode' row 0"):
        load_profile(data)
