"""The knockout mask modes against an eager reference with the same logits set to -inf, on every family's tiny
build; per-row key sets in one batch against one sample at a time; a fully blocked row; nothing left behind.

The reference is written here, independently of vrh.core.knockout: a registered attention function that
computes every head's full eager attention (additive eager masks, softcap, float32 softmax) and sets the
logits of the masked heads from the blocked queries to the blocked keys to -inf; a row with no visible key
left is defined as 0 (the documented convention).
"""

from __future__ import annotations

import pytest
import torch

import vrh.core.attention as attention
from vrh.core.knockout import KnockoutSettings, _blocked_rows, knockout_batch, knockout_settings
from vrh.core.layout import VISION, cross_layers, visual_key_space
from vrh.core.masking import RowSubset, get_mask_mode, mask_heads
from vrh.models.adapters import get_adapter, registered_adapters
from vrh.testing import TINY_BUILDERS

from tests.models.adapters.pixels import coord_image

NAMES = sorted(registered_adapters())
EXPRESSIONS = ["red ball", "man in a hat next to the window"]
IMAGES = [coord_image(150, 100), coord_image(70, 90)]
BOXES = [(10.0, 20.0, 60.0, 80.0), (5.0, 8.0, 40.0, 50.0)]
REF = "vrh_test_knockout_eager"
_SPEC: dict = {}  # the reference's blocked edges: id(module) -> (heads, block (B, N, S) bool)


def _reference(module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kwargs):
    from transformers.integrations.sdpa_attention import repeat_kv

    n_rep = query.shape[1] // key.shape[1]
    k, v = repeat_kv(key, n_rep), repeat_kv(value, n_rep)  # (B, H, S, D)
    w = torch.matmul(query, k.transpose(2, 3)) * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    if softcap is not None:
        w = torch.tanh(w / softcap) * softcap
    S = k.shape[2]
    if attention_mask is not None:
        m = attention_mask[..., :S]
        visible = m > torch.finfo(m.dtype).min / 2 if m.dtype != torch.bool else m
        w = w + (m if m.dtype != torch.bool else torch.zeros_like(w).masked_fill(~m, torch.finfo(w.dtype).min))
    else:
        visible = torch.ones(1, 1, query.shape[2], S, dtype=torch.bool).tril(S - query.shape[2]) \
            if query.shape[2] > 1 and getattr(module, "is_causal", True) else torch.ones(1, 1, 1, S, dtype=torch.bool)
        w = w.masked_fill(~visible, torch.finfo(w.dtype).min)
    spec = _SPEC.get(id(module))
    zero = None
    if spec is not None:
        heads, block = spec  # block (B, N, S): True = logit set to -inf for the masked heads
        hm = torch.zeros(query.shape[1], dtype=torch.bool)
        hm[heads] = True
        edge = block[:, None] & hm[None, :, None, None]  # (B, H, N, S)
        w = w.masked_fill(edge, float("-inf"))
        left = (visible.expand_as(w) & ~edge).any(-1, keepdim=True)  # (B, H, N, 1)
        zero = ~left & edge.any(-1, keepdim=True)
        w = w.masked_fill(zero, 0.0)
    p = torch.softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(p, v)  # (B, H, N, D)
    if zero is not None:
        out = out.masked_fill(zero, 0.0)
    return out.transpose(1, 2).contiguous(), None


def _register_reference():
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(REF, _reference)
    AttentionMaskInterface.register(REF, eager_mask)


def _run_reference(model, adapter, inputs):
    _register_reference()
    configs = attention.language_configs(model, adapter)
    before = [c._attn_implementation_internal for c in configs]
    try:
        for c in configs:
            c._attn_implementation_internal = REF
        with torch.no_grad():
            return model(**inputs).logits
    finally:
        for c, impl in zip(configs, before):
            c._attn_implementation_internal = impl
        _SPEC.clear()


def _batch(adapter, processor, n=2):
    prompts = [adapter.grounding_prompt(e) for e in EXPRESSIONS[:n]]
    return adapter.build_batch(processor, IMAGES[:n], prompts)


def _referent(batch, b):
    """Row b's referent tokens read here from the rectangles: a cell whose rectangle overlaps the box with
    positive area."""
    r, (x1, y1, x2, y2) = batch.visual_rects[b], BOXES[b]
    w = (r[:, 2].clamp(max=x2) - r[:, 0].clamp(min=x1)).clamp(min=0)
    h = (r[:, 3].clamp(max=y2) - r[:, 1].clamp(min=y1)).clamp(min=0)
    return batch.visual_positions[b][(w * h > 0) & batch.cell_tokens[b]]


@pytest.fixture(params=NAMES)
def family(request):
    model, processor = TINY_BUILDERS[request.param]()
    return request.param, get_adapter(request.param), model, processor


def _heads(adapter, model):
    L = adapter.num_layers(model)
    return [(layer, 1) for layer in range(L)] + [(0, 0), (L - 1, 3)]


def _blocked_spec(model, adapter, batch, heads, mode, queries):
    """id(module) -> (heads, block (B, N, S)) for a prompt forward of ``batch``."""
    S = batch.seq_len
    in_text = visual_key_space(adapter, model) != VISION
    cross = cross_layers(adapter, model)
    n_vision = None
    if cross:
        n_vision = max(int(v.max()) + 1 for v in batch.visual_positions)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    spec = {}
    for layer, hs in by_layer.items():
        is_cross = layer in cross
        n_keys = n_vision if is_cross else S
        block = torch.zeros(batch.batch_size, S, n_keys, dtype=torch.bool)
        for b in range(batch.batch_size):
            vis = batch.visual_positions[b]
            first = S - 1 if queries == "answer" else (0 if (is_cross or not in_text) else int(vis.min()))
            if is_cross and mode == "knockout-image":
                keys = torch.arange(n_keys)
            elif not is_cross and not in_text:
                keys = torch.zeros(0, dtype=torch.long)  # the text holds no visual token
            else:
                keys = vis if mode == "knockout-image" else _referent(batch, b)
            block[b, first:, keys] = True
        spec[id(adapter.attention_module(model, layer))] = (hs, block)
    return spec


@pytest.mark.parametrize("mode,queries", [("knockout-image", "image"), ("knockout-referent", "image"),
                                          ("knockout-image", "answer")])
def test_knockout_matches_eager_reference(family, mode, queries):
    """A prompt forward under the knockout (fused sdpa + recomputed rows) == the eager reference with the same
    logits at -inf (<= 1e-4, float32), on a left-padded batch of two images; the knockout changes the logits."""
    name, adapter, model, processor = family
    batch = _batch(adapter, processor)
    heads = _heads(adapter, model)
    with torch.no_grad():
        plain = model(**batch.inputs).logits
        with knockout_settings(KnockoutSettings(queries)), knockout_batch(
                batch, BOXES, in_text=visual_key_space(adapter, model) != VISION), \
                mask_heads(model, adapter, heads, mode=mode):
            got = model(**batch.inputs).logits
    if visual_key_space(adapter, model) == VISION:
        n_vision = max(int(v.max()) + 1 for v in batch.visual_positions)
        assert n_vision > 0
    _SPEC.update(_blocked_spec(model, adapter, batch, heads, mode, queries))
    want = _run_reference(model, adapter, batch.inputs)
    real = batch.inputs["attention_mask"].bool()  # compare real tokens (padding rows are never read)
    assert (got - want)[real].abs().max().item() <= 1e-4, name
    assert (got - plain)[real].abs().max().item() > 1e-6, f"{name}: the knockout changed nothing"
    assert not attention._REWRITERS and not attention._UNIFORM


def test_per_row_key_sets_equal_one_sample_at_a_time():
    """knockout-referent's per-row application on a batch of two samples (each its own box and head set) ==
    each sample alone under the single-set application (last-position logits, <= 1e-4)."""
    name = "qwen2_5_vl"
    adapter = get_adapter(name)
    model, processor = TINY_BUILDERS[name]()
    batch = _batch(adapter, processor)
    row_heads = [[(0, 1), (1, 2)], [(1, 0)]]
    mode = get_mask_mode("knockout-referent")
    with torch.no_grad(), knockout_settings(KnockoutSettings("image")):
        with knockout_batch(batch, BOXES), mode.apply_rows(model, adapter, row_heads, RowSubset()):
            together = model(**batch.inputs).logits[:, -1]
        for b in range(2):
            one = adapter.build_batch(processor, [IMAGES[b]], [adapter.grounding_prompt(EXPRESSIONS[b])])
            with knockout_batch(one, [BOXES[b]]), mask_heads(model, adapter, row_heads[b], mode="knockout-referent"):
                alone = model(**one.inputs).logits[0, -1]
            assert (together[b] - alone).abs().max().item() <= 1e-4
        plain = model(**batch.inputs).logits[:, -1]
    assert (together - plain).abs().max().item() > 1e-6


def test_a_fully_blocked_row_is_zero_not_nan():
    """Every key blocked (a cross-attention head under knockout-image): the head's output is 0 there; the rows
    with a key left are the softmax over it."""
    torch.manual_seed(0)
    B, H, Hkv, N, S, D = 1, 2, 1, 3, 4, 8
    q, k, v = torch.randn(B, H, N, D), torch.randn(B, Hkv, S, D), torch.randn(B, Hkv, S, D)
    call = attention.AttentionCall(torch.nn.Module(), q, k, None, D ** -0.5, False, None)
    blocked_q = torch.tensor([[False, True, True]])  # (B, Q')
    blocked_k = torch.tensor([[True, True, True, True]])  # (B, S): every key
    out = _blocked_rows(call, v, torch.tensor([0, 1]), torch.arange(N), blocked_q, blocked_k)  # (B, N, u, D)
    assert torch.isfinite(out).all()
    assert out[0, 1:].abs().sum() == 0
    want = torch.softmax(q[0, :, 0] @ k[0, 0].T * D ** -0.5, -1) @ v[0, 0]  # (H, D): row 0 is not blocked
    assert torch.allclose(out[0, 0], want, atol=1e-6)


def test_knockout_without_an_announced_batch_is_an_error_and_leaves_nothing():
    name = "llava"
    adapter = get_adapter(name)
    model, processor = TINY_BUILDERS[name]()
    batch = _batch(adapter, processor, n=1)
    impl = [c._attn_implementation_internal for c in attention.language_configs(model, adapter)]
    hooks = lambda: [(len(m._forward_pre_hooks), len(m._forward_hooks)) for m in model.modules()]  # noqa: E731
    hooks_before = hooks()
    with pytest.raises(RuntimeError, match="no prompt batch announced"):
        with torch.no_grad(), mask_heads(model, adapter, [(0, 0)], mode="knockout-image"):
            model(**batch.inputs)
    assert not attention._REWRITERS
    assert [c._attn_implementation_internal for c in attention.language_configs(model, adapter)] == impl
    assert hooks() == hooks_before


def test_knockout_referent_refuses_a_sample_without_a_box():
    name = "llava"
    adapter = get_adapter(name)
    model, processor = TINY_BUILDERS[name]()
    batch = _batch(adapter, processor, n=1)
    with pytest.raises(ValueError, match="without a box"):
        with torch.no_grad(), knockout_batch(batch, [None]), \
                mask_heads(model, adapter, [(0, 0)], mode="knockout-referent"):
            model(**batch.inputs)


def test_knockout_settings_refuse_an_unknown_rule():
    with pytest.raises(ValueError, match="choose from"):
        KnockoutSettings("everything")


def test_decode_steps_equal_full_forwards():
    """Greedy generate under knockout-referent (KV-cached decode steps) == each step a full forward over the
    sequence so far (every query row recomputed): the decode path reads its query position and keys right."""
    name = "llava"
    adapter = get_adapter(name)
    model, processor = TINY_BUILDERS[name]()
    batch = _batch(adapter, processor)
    heads = [(0, 1), (1, 2), (1, 0)]
    steps = 4
    with torch.no_grad(), knockout_batch(batch, BOXES), mask_heads(model, adapter, heads, mode="knockout-referent"):
        out = model.generate(**batch.inputs, max_new_tokens=steps, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=0)
    ids, mask = batch.inputs["input_ids"], batch.inputs["attention_mask"]
    extra = {k: v for k, v in batch.inputs.items() if k not in ("input_ids", "attention_mask")}
    for t in range(steps):
        with torch.no_grad(), knockout_batch(batch, BOXES), \
                mask_heads(model, adapter, heads, mode="knockout-referent"):
            logits = model(input_ids=ids, attention_mask=mask, **extra).logits[:, -1]
        assert (logits - out.scores[t]).abs().max().item() <= 1e-4, t
        nxt = out.sequences[:, batch.seq_len + t:batch.seq_len + t + 1]
        ids, mask = torch.cat([ids, nxt], 1), torch.cat([mask, torch.ones_like(nxt)], 1)


def test_batched_knockout_conditions_equal_one_head_set_at_a_time(tmp_path):
    """run_conditions with knockout conditions: batched rows (per-row key sets, shared prefill) give the records
    of one head set at a time, and random controls carry the same mask mode."""
    from PIL import Image, ImageDraw

    from vrh.data import Sample
    from vrh.experiments import conditions as cond
    from vrh.experiments.runner import run_conditions
    from vrh.models.loading import LoadedModel
    from vrh.tasks import get_task

    model, processor = TINY_BUILDERS["qwen2_5_vl"]()
    lm = LoadedModel(model, processor, get_adapter("qwen2_5_vl"), "tiny")
    samples = []
    for i, (w, h) in enumerate([(64, 48), (48, 64), (56, 56)]):
        im = Image.new("RGB", (w, h), (240, 240, 240))
        ImageDraw.Draw(im).rectangle([4 + 3 * i, 6, 30 + 3 * i, 40], fill=(200, 30, 30))
        im.save(tmp_path / f"im{i}.png")
        samples.append(Sample(id=f"g{i}", image_path=tmp_path / f"im{i}.png", task="grounding",
                              expression=f"red box {i}", box=(4.0 + 3 * i, 6.0, 30.0 + 3 * i, 40.0)))
    conds = [cond.none()]
    for mode in ("knockout-referent", "knockout-image"):
        conds.append(cond.explicit([(0, 1), (1, 2)], mask_mode=mode, label=f"top2-{mode}"))
        control = cond.random_controls(2, 4, 2, [0, 1], outside=[(0, 1), (1, 2)], mask_mode=mode,
                                       label=f"random{{k}}:s{{seed}}-{mode}")
        assert all(c.mask_mode == mode for c in control.conditions)
        conds.extend(control.conditions)
    conds.append(cond.explicit([(l, h) for l in range(2) for h in range(4)], mask_mode="knockout-image",
                               label="all-image"))
    kw = dict(batch_size=4, max_new_tokens=5, progress=False)
    with knockout_settings(KnockoutSettings("image")):
        batched = run_conditions(lm, get_task("grounding"), samples, conds, batch_conditions=True, **kw)
        alone = run_conditions(lm, get_task("grounding"), samples, conds, batch_conditions=False, **kw)
    for c in conds:
        assert batched.records[c.label] == alone.records[c.label], c.label
    assert batched.records["all-image"] != batched.records["none"]  # the knockout acts


def test_config_json_records_the_knockout_settings_only_under_a_knockout_mode():
    from vrh.experiments.settings import SweepSettings
    from vrh.options import config_record

    plain = config_record(SweepSettings(model="m", data="d", heads="h", out="o"))
    assert "blocked_queries" not in plain  # a zero-mode run's config.json is what it always was (resume)
    knocked = config_record(SweepSettings(model="m", data="d", heads="h", out="o", mask_mode="knockout-referent",
                                          blocked_queries="image"))
    assert knocked["blocked_queries"] == "image" and knocked["referent_min_overlap"] == 0.0
