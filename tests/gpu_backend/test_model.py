"""The synthetic model's attention reads the paged KV correctly."""

from __future__ import annotations

import torch

from gpu_backend.model import (
    BatchIndex,
    SliceSpec,
    SyntheticModel,
    paged_attention,
    reference_attention,
)
from tests.gpu_backend.builders import make_pools


def test_paged_attention_equals_reference_on_contiguous_kv(tiny):
    dev, _ = make_pools("layer_first", dev_pages=16, page_size=4)
    g = torch.Generator().manual_seed(0)
    dev.kv.copy_(torch.randn(dev.kv.shape, generator=g))
    # two requests: a prefill chunk over 5 cached tokens, and a decode step
    specs = [SliceSpec(1, context=5, new=3, pages=(9, 2)), SliceSpec(2, 10, 1, (4, 5, 11))]
    idx = BatchIndex(specs, page_size=4)
    hq, d = tiny.heads_per_rank, tiny.head_dim
    q = torch.randn(idx.num_tokens, hq, d, generator=g)
    kflat, vflat = dev.k(0).view(-1, 2, d), dev.v(0).view(-1, 2, d)
    out = paged_attention(q, kflat, vflat, idx)
    row = 0
    for s in specs:
        slots = [s.pages[t // 4] * 4 + t % 4 for t in range(s.context + s.new)]
        pos = list(range(s.context, s.context + s.new))
        ref = reference_attention(q[row:row + s.new], kflat[slots], vflat[slots], pos)
        torch.testing.assert_close(out[row:row + s.new].double(), ref, rtol=1e-5, atol=1e-5)
        row += s.new


def test_model_output_depends_on_page_contents_not_page_ids(tiny):
    model = SyntheticModel(tiny, "cpu", torch.float32, seed=3)
    outs = []
    for pages in [(0, 1, 2), (7, 3, 5)]:
        dev, _ = make_pools("layer_first", dev_pages=8, page_size=4)
        idx = BatchIndex([SliceSpec(1, 0, 10, pages)], page_size=4)
        x = model.embed_tokens(idx)
        for layer in range(tiny.num_layers):
            x = model.forward_layer(layer, x, idx, dev)
        outs.append(x)
        assert dev.kv[:, :, list(pages)].abs().sum() > 0  # KV landed in those pages
    torch.testing.assert_close(outs[0], outs[1])
    assert torch.isfinite(outs[0]).all()
