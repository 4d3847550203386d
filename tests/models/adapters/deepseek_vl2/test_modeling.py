"""DeepSeek-VL2: the model vrh composes, on its own (:mod:`vrh.models.adapters.deepseek_vl2.modeling`).
The family end to end (loading, the adapter) is tests/models/adapters/test_deepseek_vl2.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def test_projector_concatenates_2x2_windows_channel_major():
    """``downsample_mlp_gelu`` on a 3 x 3 grid: zero-padded to 4 x 4, window (I, J) -> for each channel c its
    (2I, 2J), (2I, 2J+1), (2I+1, 2J), (2I+1, 2J+1) values (F.unfold's order, as the remote projector)."""
    from vrh.models.adapters.deepseek_vl2.modeling import Projector

    proj = Projector(dict(input_dim=2, n_embed=5, mlp_ratio=1, depth=2, downsample_ratio=2))
    x = torch.randn(1, 9, 2)  # (T, g*g, C), g = 3
    grid = F.pad(x.view(3, 3, 2), (0, 0, 0, 1, 0, 1))  # (4, 4, C)
    windows = torch.stack([torch.stack([grid[2 * i + a, 2 * j + b] for a in (0, 1) for b in (0, 1)], dim=1).flatten()
                           for i in (0, 1) for j in (0, 1)])  # (4, C*4): channel-major
    with torch.no_grad():
        assert torch.allclose(proj(x)[0], proj.layers(windows), atol=1e-6)


def test_router_matches_native_router_where_native_applies():
    """With the native router's settings (softmax, no renormalisation) the port is the native function."""
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2TopkRouter

    from vrh.models.adapters.deepseek_vl2.modeling import Router, language_config

    for method, groups in (("greedy", 1), ("group_limited_greedy", 2)):
        cfg = language_config({"language_config": dict(hidden_size=16, num_attention_heads=2, n_routed_experts=8,
                                                       num_experts_per_tok=3, routed_scaling_factor=2.0, n_group=groups, n_shared_experts=1,
                                                       topk_group=1, topk_method=method, num_hidden_layers=1)})
        ours, native = Router(cfg), DeepseekV2TopkRouter(cfg)
        with torch.no_grad():
            ours.weight.normal_()
            native.weight.copy_(ours.weight)
        x = torch.randn(2, 5, 16)
        (l1, w1, i1), (l2, w2, i2) = ours(x), native(x)
        o1, o2 = i1.sort(-1), i2.sort(-1)
        assert torch.equal(o1.values, o2.values) and torch.equal(l1, l2)
        assert torch.allclose(w1.gather(1, o1.indices), w2.gather(1, o2.indices))
