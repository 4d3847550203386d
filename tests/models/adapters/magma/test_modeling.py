"""Magma: the model vrh composes, on its own (:mod:`vrh.models.adapters.magma.modeling`).
The family end to end (loading, the adapter) is tests/models/adapters/test_magma.py."""

from __future__ import annotations

import re

import torch

DEPTHS, WIDTHS = (1, 2, 1, 1), (8, 16, 16, 24)  # a shrunk ConvNeXt-XXLarge


def _real_vision() -> dict:
    return {"vision_backbone": "convnextxxlarge", "mm_hidden_size": 3072, "mm_projector_type": "mlp2x_gelu"}


def test_convnext_layernorms_have_eps_1e5_everywhere():
    """Magma-8B's tower is timm's convnext_xxlarge (norm_eps 1e-5): the stem, every block and every downsampling
    LayerNorm, 1 + 40 + 3 of them, all with eps 1e-5 (transformers' ConvNextModel would hard-code 1e-6)."""
    from vrh.models.adapters.magma.modeling import MagmaVisionTower

    with torch.device("meta"):
        tower = MagmaVisionTower(_real_vision())
    norms = [m for m in tower.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 1 + (3 + 4 + 30 + 3) + 3
    assert {m.eps for m in norms} == {1e-5}
    assert tuple(tower.clip_vision_model.trunk.stages[3].blocks[0].norm.weight.shape) == (3072,)
    # with open_clip's pooled head (timm head.norm, a 3072 -> 1024 projection) it is the "847M params" of timm's
    # image-encoder-only export of the same tower (huggingface.co/timm/convnext_xxlarge.clip_laion2b_rewind)
    n = sum(p.numel() for p in tower.parameters()) + 2 * 3072 + 3072 * 1024
    assert round(n / 1e6) == 847


def test_trunk_matches_transformers_convnext_with_the_same_weights_and_eps():
    """The ported trunk computes what transformers' own ConvNeXt computes once its LayerNorms get eps 1e-5 and our
    weights; left at its hard-coded 1e-6 it differs (so eps is really in play)."""
    from transformers import ConvNextConfig, ConvNextModel

    from vrh.models.adapters.magma.modeling import ConvNeXtTrunk

    torch.manual_seed(0)
    ours = ConvNeXtTrunk(DEPTHS, WIDTHS).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0, 0.3)
    ref = ConvNextModel(ConvNextConfig(hidden_sizes=list(WIDTHS), depths=list(DEPTHS))).eval()
    rename = [(r"^stem\.0\.", "embeddings.patch_embeddings."), (r"^stem\.1\.", "embeddings.layernorm."),
              (r"^stages\.(\d+)\.downsample\.", r"encoder.stages.\1.downsampling_layer."),
              (r"^stages\.(\d+)\.blocks\.", r"encoder.stages.\1.layers."), (r"conv_dw", "dwconv"),
              (r"\.norm\.", ".layernorm."), (r"mlp\.fc1", "pwconv1"), (r"mlp\.fc2", "pwconv2"),
              (r"gamma$", "layer_scale_parameter")]

    def theirs(name: str) -> str:
        for pattern, repl in rename:
            name = re.sub(pattern, repl, name)
        return name

    ref.load_state_dict({theirs(k): v for k, v in ours.state_dict().items()}, strict=False)
    assert all(torch.equal(ref.state_dict()[theirs(k)], v) for k, v in ours.state_dict().items())
    x = torch.randn(2, 3, 64, 96)
    with torch.no_grad():
        want_1e6 = ref(x).last_hidden_state
        for m in ref.modules():
            if hasattr(m, "eps") and "LayerNorm" in type(m).__name__:
                m.eps = 1e-5
        want = ref(x).last_hidden_state
        got = ours(x)
    assert got.shape == (2, WIDTHS[-1], 2, 3)  # stride 32
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, want_1e6, atol=1e-6, rtol=0)
