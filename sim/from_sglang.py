"""``hicache-lab run --from-sglang``: an SGLang launch command over a base scenario.

    base scenario (SCENARIO, or DEFAULT_BASE: quick's chat workload on h100-sxm)
      + model  (--model-config config.json, a local --model-path, or a known preset)
      + cache, scheduler, replicas from the server args (hicache.sglang.mapping)
      + --set overrides  ->  one variant named "sglang", validated like any scenario

Lives in ``sim/`` because sizing L1 from ``--mem-fraction-static`` needs the model's KV
and weight bytes (:class:`sim.hardware.model.ModelPreset`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hicache.presets import is_name
from hicache.sglang.hf_config import load_hf_config, preset_from_hf
from hicache.sglang.launch import read_server_args
from hicache.sglang.mapping import Mapped, MappingError, device_tokens, map_server_args
from sim.hardware.loader import resolve
from sim.hardware.model import load_model

if TYPE_CHECKING:
    from hicache.scenario import Scenario

DEFAULT_BASE: dict[str, Any] = {
    "name": "sglang", "seed": 0, "hardware": "h100-sxm",
    "workload": {"kind": "multiturn", "num_clients": 24, "num_rounds": 6,
                 "request_length": 1024, "output_length": 32, "request_rate": 16,
                 "max_parallel": 24},
}  # fmt: skip
# Hugging Face repo ids with a preset here (their config.json gives the same shapes).
KNOWN_MODELS = {
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b", "meta-llama/Meta-Llama-3-8B-Instruct":
    "llama-3-8b", "meta-llama/Llama-3.1-8B": "llama-3-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3-8b",
    "meta-llama/Meta-Llama-3-70B": "llama-3-70b-tp8",
    "meta-llama/Meta-Llama-3-70B-Instruct": "llama-3-70b-tp8",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3-70b-tp8",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3-70b-tp8",
}


def _model(args: argparse.Namespace, fields: dict, tp: int) -> tuple[dict, int | None]:
    """(preset mapping, vocab size if known) for the server's model."""
    path = fields.get("model_path")
    cfg_path = args.model_config
    if cfg_path is None and path and (Path(str(path)) / "config.json").is_file():
        cfg_path = str(path)
    if cfg_path is not None:
        cfg = load_hf_config(cfg_path)
        name = Path(str(path or cfg_path)).name.lower() or "model"
        preset, notes = preset_from_hf(cfg, name=name, source=str(cfg_path),
                                       tensor_parallel=tp)
        for note in notes:
            print(f"--from-sglang: model {name}: {note}", file=sys.stderr)
        vocab = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
        return preset, vocab if isinstance(vocab, int) else None
    if path in KNOWN_MODELS:
        preset, _ = resolve(KNOWN_MODELS[path], "models")
        return {**preset, "tensor_parallel": tp}, None
    raise ValueError(f"--model-path {path}: no config.json there and no preset for it; pass "
                     "--model-config path/to/config.json (the file on the model's Hugging "
                     f"Face page). Presets: {', '.join(sorted(set(KNOWN_MODELS)))}")


def _hardware(d: dict[str, Any], overrides: list[str], source: str,
              folder: Path | None) -> Any:
    """The hardware profile the scenario will have once the ``hardware`` ``--set`` items
    (``hardware=NAME``, ``hardware.gpu.memory_bytes=...``) apply, in their order."""
    from hicache.scenario import apply_overrides

    items = [i for i in overrides if i.partition("=")[0].strip().split(".")[0] == "hardware"]
    return apply_overrides({"hardware": d.get("hardware", "h100-sxm")}, items,
                           source=f"{source} (override)", base=Path.cwd(),
                           doc_base=folder)["hardware"]


def _gpu_memory(args: argparse.Namespace, hardware: Any) -> int:
    if args.gpu_memory:
        return args.gpu_memory
    data, origin = resolve(hardware, "hardware")
    mem = (data.get("gpu") or {}).get("memory_bytes")
    if not isinstance(mem, int | float) or mem <= 0:
        raise ValueError(f"--mem-fraction-static needs the GPU's memory: {origin} has no "
                         "gpu.memory_bytes; pass --gpu-memory (e.g. 80GiB) or "
                         "--max-total-tokens")
    return int(mem)


def _weight_bytes(model: Any, vocab: int | None) -> int:
    params = sum(model.linear_params_per_layer(k) for k in model.layer_kinds)
    if vocab:
        params += 2 * vocab * model.hidden_size / model.tensor_parallel  # embed + LM head
    return int(params * model.dtype_bytes)


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The scenario ``run --from-sglang`` simulates (see the module docstring)."""
    from hicache.cli_common import load_scenario_arg
    from hicache.scenario import Scenario, apply_overrides

    fields, source = read_server_args(args.from_sglang)
    m: Mapped = map_server_args(fields)
    base_sc = load_scenario_arg(args.scenario) if args.scenario is not None else None
    base = base_sc.to_mapping() if base_sc is not None else copy.deepcopy(DEFAULT_BASE)
    if base.pop("variants", None):
        print("--from-sglang: the base scenario's variants are dropped; the server args "
              "define the one variant", file=sys.stderr)
    d = {**base, "name": f"{base['name']}-sglang" if args.scenario else "sglang"}
    if args.hardware:  # a path on the command line is relative to the cwd, as --set's
        ref = Path(args.hardware).expanduser()
        d["hardware"] = (args.hardware if is_name(args.hardware) or ref.is_absolute()
                         else str(ref.resolve()))
    folder = base_sc.base_dir if base_sc is not None else None
    d["model"], vocab = _model(args, fields, m.tensor_parallel)
    model = load_model(d["model"])
    cache = {**(base.get("cache") or {}), **m.cache}
    if m.mem_fraction_static is not None:  # else --max-total-tokens set device_tokens
        try:
            cache["device_tokens"] = device_tokens(
                _gpu_memory(args, _hardware(d, args.overrides, source, folder)),
                m.mem_fraction_static,
                _weight_bytes(model, vocab), model.kv_bytes_per_token())
        except MappingError as e:
            raise ValueError(str(e)) from None
    d["cache"] = cache
    d["scheduler"] = {**(base.get("scheduler") or {}), **m.scheduler}
    d["replicas"] = m.replicas
    if m.replicas > 1:
        d.setdefault("router", "round_robin")  # SGLang's DP load balancing default
    d = apply_overrides(d, args.overrides, source=f"{source} (override)", base=Path.cwd(),
                        doc_base=folder)
    sc = Scenario.from_mapping(d, source=source, base=folder)
    _say(m, dataclasses.asdict(sc.cache), model)
    return sc


def _say(m: Mapped, cache: dict, model: Any) -> None:
    gib = cache["device_tokens"] * model.kv_bytes_per_token() / 2**30
    tiers = "L1+L2" if cache.get("enable_hierarchical_cache") else "L1 only"
    if cache.get("hicache_storage_backend"):
        tiers += f" +L3 {cache['hicache_storage_backend']}"
    print(f"--from-sglang: L1 = {cache['device_tokens']:,} tokens ({gib:.1f} GiB of KV per "
          f"rank), page {cache['page_size']}, {tiers}", file=sys.stderr)
    for a in m.assumed:
        print(f"--from-sglang: assumed {a}", file=sys.stderr)
    if m.ignored:
        print(f"--from-sglang: ignored (no effect on caching or scheduling here): "
              f"{', '.join(m.ignored)}", file=sys.stderr)
