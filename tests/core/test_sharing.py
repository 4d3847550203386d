"""Shared prompt work across a batch's rows (vrh.core.sharing): exact on every family's tiny build and on the
organism (the same logits bit for bit, the same records and samples.jsonl bytes with sharing on and off), the
shares really engaged (the vision encoder sees each distinct image once, layer 0 runs on fewer rows), resume,
the batch halving on OOM, and sharing off with a reason where a model gives no way in."""

import json

import pytest
import torch
from PIL import Image, ImageDraw

import vrh.experiments.evaluation as evaluation
from vrh import runs
from vrh.core.masking import RowSubset, mask_heads_per_row
from vrh.core import sharing
from vrh.core.sharing import _split_call, prefix_plan, shared_prefill, sharing_refusals
from vrh.data import Sample
from vrh.experiments import conditions as cond
from vrh.experiments.evaluation import evaluate_rows
from vrh.experiments.runner import run_conditions
from vrh.models.adapters import get_adapter
from vrh.models.loading import LoadedModel, load_model
from vrh.organism.world import write_split
from vrh.tasks import get_task
from vrh.testing import TINY_BUILDERS

# families whose decoder layers take an input the prefix share cannot split by row: it stays off there (exact)
PREFIX_FALLBACK = {"mllama": "'cross_attention_states'"}  # [B * tiles, keys, d]: every row's tiles, in every layer
HEAD_SETS = [[], [(1, 0)], [(1, 0), (1, 1)], [(0, 1)]]  # unmasked, upper layer, upper layer, layer 0


def _samples(root, n=2):
    out = []
    for i, ((w, h), expr) in enumerate(zip([(56, 42), (84, 56), (70, 70)], ["the box", "a long red expression here",
                                                                          "box"])):
        im = Image.new("RGB", (w, h), (240, 240, 240))
        ImageDraw.Draw(im).rectangle([4 + 3 * i, 6, 30, 40], fill=(200, 30, 30))
        im.save(root / f"im{i}.png")
        out.append(Sample(id=f"g{i}", image_path=root / f"im{i}.png", task="grounding", expression=expr,
                          box=(4.0 + 3 * i, 6.0, 30.0, 40.0)))
    return out[:n]


def _encoder_entries(lm):
    """A recorder of the entries (dim 0 of its pixel input) each real vision-encoder call computes."""
    enc = lm.adapter.vision_encoder(lm.model)
    real, seen = enc.forward, []

    def forward(*args, **kwargs):
        x = args[0] if args else kwargs.get("pixel_values", kwargs.get("hidden_states"))
        seen.append(int(x.shape[0]))
        return real(*args, **kwargs)

    enc.forward = forward
    return enc, seen


def _layer0_rows(lm):
    """A recorder of the rows layer 0's o_proj computes in prompt forwards (seq > 1)."""
    seen = []
    o_proj = lm.adapter.o_proj(lm.model, 0)
    handle = o_proj.register_forward_pre_hook(lambda m, a: seen.append(a[0].shape[0]) if a[0].shape[1] > 1 else None)
    return handle, seen


def _hook_count(model):
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


@pytest.mark.parametrize("family", sorted(TINY_BUILDERS))
def test_sharing_is_exact_and_engaged_on_every_family(family, tmp_path):
    model, processor = TINY_BUILDERS[family]()
    lm = LoadedModel(model, processor, get_adapter(family), f"tiny_{family}")
    assert lm.num_layers >= 2 and lm.num_heads >= 2
    assert sharing_refusals(model, lm.adapter) == {}, "a built-in family must reach both shares"
    samples = _samples(tmp_path)
    rows = [(s, hs) for s in samples for hs in HEAD_SETS]  # sample-major, as the runner plans them
    task = get_task("grounding")
    enc, entries = _encoder_entries(lm)
    handle, layer0 = _layer0_rows(lm)
    try:
        off = evaluate_rows(lm, task, rows, batch_size=8, max_new_tokens=4, share_vision=False, share_prefix=False)
        off_entries, off_layer0 = list(entries), list(layer0)
        entries.clear()
        layer0.clear()
        on = evaluate_rows(lm, task, rows, batch_size=8, max_new_tokens=4)
    finally:
        handle.remove()
        del enc.forward
    assert off_layer0 and set(off_layer0) == {8}
    if family in PREFIX_FALLBACK:  # every row computed, and the reason stated
        assert set(layer0) == {8} and any(PREFIX_FALLBACK[family] in r for r in sharing.FALLBACKS)
    else:  # per sample the stand-in and the layer-0 row; only the first forward (a family generating without a
        # KV cache re-runs prompt + answer, whose tokens differ between a sample's rows)
        assert len(layer0) == len(off_layer0) and layer0[0] == 4 and set(layer0[1:]) <= {8}
    assert sum(entries) * 2 < sum(off_entries) * 1.01  # each image encoded once, not 4 times
    assert json.dumps(on, sort_keys=True) == json.dumps(off, sort_keys=True)

    # the logits of the prompt forward are the same bits, not just the same argmax
    batch = lm.adapter.build_batch(processor, [s.load_image() for s, _ in rows],
                                   [task.prompt(lm.adapter, s) for s, _ in rows])
    heads = [hs for _, hs in rows]
    hooks_before = _hook_count(model)
    logits = []
    for share in (False, True):
        subset = RowSubset()
        with torch.no_grad(), mask_heads_per_row(model, lm.adapter, heads, subset=subset), \
                shared_prefill(model, lm.adapter, [s.id for s, _ in rows], heads, subset, vision=share, prefix=share):
            logits.append(model(**batch.inputs).logits)
    assert torch.equal(logits[0], logits[1])
    assert _hook_count(model) == hooks_before  # every hook gone
    assert "forward" not in vars(lm.adapter.vision_encoder(model))


def test_prefix_plan_rows():
    plan = prefix_plan(["a", "a", "a", "b", "b"], [2, 0, 2, 2, 2], num_layers=3)
    assert plan.computed == ((0, 1, 3), (0, 1, 3), (0, 1, 2, 3, 4))
    assert plan.source[0] == (0, 1, 0, 2, 2)
    assert plan.started_above_0 == pytest.approx(2 / 5)
    assert plan.computed_fraction == pytest.approx((3 + 3 + 5) / 15)
    with pytest.raises(ValueError, match="2 groups for 1 rows"):
        prefix_plan(["a", "b"], [0], 2)


def test_a_layer_input_it_cannot_split_runs_on_every_row():
    hidden = torch.zeros(4, 5, 8)
    mask = torch.zeros(4, 1, 5, 5, dtype=torch.bool)
    assert _split_call((hidden,), {"attention_mask": mask}, 4, 0) is not None
    # mllama's cross-attention states: an extra tensor input -> no split (the layer runs on every row)
    reason = _split_call((hidden,), {"attention_mask": mask, "cross_attention_states": torch.zeros(4, 3, 8)}, 4, 0)
    assert reason == "input 'cross_attention_states' is not one this module knows how to split by row"
    assert _split_call((hidden[:, :1],), {"attention_mask": mask}, 4, 0) is None  # a decode step
    assert "not one this module knows" in _split_call((hidden,), {"position_ids": torch.zeros(3, 4, 5)}, 4, 0)


def test_a_model_with_no_way_in_runs_unshared_with_a_reason(tmp_path):
    model, processor = TINY_BUILDERS["llava"]()
    base = get_adapter("llava")

    class Closed(type(base)):
        def vision_encoder(self, model):
            return None

        def decoder_layers(self, model):
            raise AttributeError("no layer list")

        def attention_module(self, model, layer):
            return model.model.language_model.layers[layer].self_attn

    reasons = sharing_refusals(model, Closed())
    assert set(reasons) == {"vision", "prefix"} and "no vision encoder" in reasons["vision"]
    samples = _samples(tmp_path)
    rows = [(s, hs) for s in samples for hs in HEAD_SETS]
    task = get_task("grounding")
    closed = evaluate_rows(LoadedModel(model, processor, Closed(), "t"), task, rows, batch_size=8, max_new_tokens=4)
    shared = evaluate_rows(LoadedModel(model, processor, base, "t"), task, rows, batch_size=8, max_new_tokens=4)
    assert json.dumps(closed, sort_keys=True) == json.dumps(shared, sort_keys=True)


# --- the organism: run folders byte for byte, resume and the OOM halving -----------------------------------
@pytest.fixture(scope="module")
def organism():
    return load_model("organism")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from vrh.data import load_dataset

    return list(load_dataset(write_split(tmp_path_factory.mktemp("world"), 4, 7, "grounding")))


def _conditions(lm):
    controls = cond.random_controls(lm.num_layers, lm.num_heads, 3, [0, 1], outside=[(2, 0), (3, 1), (3, 5)],
                                    method="m")
    return [cond.none(), cond.explicit([(2, 0)], label="top1"), cond.explicit([(2, 0), (3, 1), (3, 5)], label="top3"),
            *controls.conditions]


def _run(path, lm, samples, resume=False, **share):
    with runs.RunFolder(path, resume=resume) as run:
        run.write_config({"command": "evaluate"})
        return run_conditions(lm, get_task("grounding"), samples, _conditions(lm), run, batch_size=6,
                              max_new_tokens=12, progress=False, **share)


def test_organism_run_folder_is_byte_identical_with_sharing_on_and_off(tmp_path, organism, world):
    on = _run(tmp_path / "on", organism, world)
    off = _run(tmp_path / "off", organism, world, share_vision=False, share_prefix=False)
    assert (tmp_path / "on" / runs.SAMPLES).read_bytes() == (tmp_path / "off" / runs.SAMPLES).read_bytes()
    assert on.records == off.records and on.summaries == off.summaries
    preds = {tuple(r["pred_text"] for r in recs) for recs in off.records.values()}
    assert len(preds) >= 2  # the masks change answers: swapped rows could not pass


def test_organism_resume_and_oom_halving_with_sharing(tmp_path, monkeypatch, organism, world):
    _run(tmp_path / "ref", organism, world, share_vision=False, share_prefix=False)
    real, calls = evaluation.answer_and_judge, []

    def crashing(lm_, task, ss, n):
        if len(calls) >= 2:
            raise KeyboardInterrupt("simulated crash")
        calls.append(len(ss))
        return real(lm_, task, ss, n)

    monkeypatch.setattr(evaluation, "answer_and_judge", crashing)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "run", organism, world)
    monkeypatch.setattr(evaluation, "answer_and_judge", real)

    # the resumed part runs out of memory on any prompt forward of more than 2 rows at the last layer
    last = organism.adapter.decoder_layers(organism.model)[-1]
    oom = []

    def too_big(module, args, kwargs):
        if args[0].shape[1] > 1 and args[0].shape[0] > 2:
            oom.append(args[0].shape[0])
            raise RuntimeError("CUDA out of memory (simulated)")

    handle = last.register_forward_pre_hook(too_big, with_kwargs=True)
    try:
        res = _run(tmp_path / "run", organism, world, resume=True)
    finally:
        handle.remove()
    assert oom, "the OOM path was not taken"
    lines = sorted((tmp_path / "run" / runs.SAMPLES).read_text().splitlines())
    assert lines == sorted((tmp_path / "ref" / runs.SAMPLES).read_text().splitlines())
    assert res.n_generated == 4 * len({c.key for c in _conditions(organism)}) - sum(calls)


def test_run_conditions_hands_the_share_options_to_every_batch(monkeypatch, organism, world):
    from vrh.experiments.settings import SweepSettings

    seen = []
    real = evaluation.shared_prefill

    def recording(*args, **kwargs):
        seen.append((kwargs["vision"], kwargs["prefix"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "shared_prefill", recording)
    conds = [cond.none(), cond.explicit([(2, 0)], label="top1")]
    run_conditions(organism, get_task("grounding"), world[:1], conds, batch_size=4, max_new_tokens=2, progress=False,
                   share_prefix=False)
    assert seen == [(True, False)]
    seen.clear()
    cfg = SweepSettings(model="organism", data="d", out="o", heads="h", share_vision=False)
    run_conditions(organism, get_task("grounding"), world[:1], conds, settings=cfg, max_new_tokens=2, progress=False)
    assert seen == [(False, True)]


def test_only_the_prompt_forward_is_shared_when_generating_without_a_cache(tmp_path):
    """Without a KV cache, generate re-runs prompt + answer each step; a sample's rows then differ in their answer
    tokens, so only the first forward may share (a family whose config says use_cache: false does this)."""
    model, processor = TINY_BUILDERS["llava"]()
    adapter = get_adapter("llava")
    task = get_task("grounding")
    rows = [(s, hs) for s in _samples(tmp_path) for hs in HEAD_SETS]
    batch = adapter.build_batch(processor, [s.load_image() for s, _ in rows], [task.prompt(adapter, s) for s, _ in rows])
    heads = [hs for _, hs in rows]
    out = []
    for share in (False, True):
        subset = RowSubset()
        with torch.no_grad(), mask_heads_per_row(model, adapter, heads, subset=subset), \
                shared_prefill(model, adapter, [s.id for s, _ in rows], heads, subset, vision=share, prefix=share):
            out.append(model.generate(**batch.inputs, max_new_tokens=6, do_sample=False, use_cache=False,
                                      pad_token_id=processor.tokenizer.pad_token_id))
    assert torch.equal(out[0], out[1])
    assert len({tuple(r[-6:].tolist()) for r in out[0][:4]}) > 1  # the rows of sample 0 answer differently


def test_the_share_flags_parse_and_stay_out_of_config_json():
    import argparse

    from vrh.experiments.settings import SweepSettings
    from vrh.options import add_options, config_record, parse_config

    parser = argparse.ArgumentParser()
    add_options(parser, SweepSettings)
    base = ["--model", "organism", "--data", "d", "--out", "o", "--heads", "h"]
    default = parse_config(SweepSettings, parser.parse_args(base))
    off = parse_config(SweepSettings, parser.parse_args([*base, "--no-share-vision", "--no-share-prefix"]))
    assert (default.share_vision, default.share_prefix, off.share_vision, off.share_prefix) == (True, True, False, False)
    assert config_record(off) == config_record(default)  # config.json as before: a resume may change them
    assert "share_vision" not in config_record(default)
