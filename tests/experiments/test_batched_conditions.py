"""Several masking conditions per batch: the runner's batched path writes exactly what the one-head-set-at-a-
time path writes (same records, tags, summaries; only line order differs), on a real tiny Qwen2.5-VL with
left-padded batches (images and expressions of different sizes), subsets, a shared key, a uniform
condition (which runs alone) and a resume after a crash."""

import json
from contextlib import contextmanager

import pytest
import torch
from PIL import Image, ImageDraw

import vrh.experiments.evaluation as evaluation
import vrh.experiments.runner as runner
from vrh.core import masking
from vrh.experiments import conditions as cond
from vrh import runs
from vrh.models.adapters import get_adapter
from vrh.data import Sample
from vrh.models.loading import LoadedModel
from vrh.experiments.runner import plan_conditions, run_conditions
from vrh.options import GenerationOptions
from vrh.tasks import get_task
from vrh.testing.tiny_models import tiny_qwen2_5_vl

SIZES = [(84, 56), (56, 56), (112, 84), (84, 84)]  # different visual token counts: left padding in every batch
EXPRESSIONS = ["the red box", "red ball", "the small red square on the left", "box"]
KW = dict(batch_size=4, max_new_tokens=6)


@pytest.fixture(scope="module")
def lm():
    model, processor = tiny_qwen2_5_vl(seed=0)
    return LoadedModel(model, processor, get_adapter("qwen2_5_vl"), "tiny_qwen2_5_vl")


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    root = tmp_path_factory.mktemp("imgs")
    out = []
    for i, ((w, h), expr) in enumerate(zip(SIZES, EXPRESSIONS)):
        im = Image.new("RGB", (w, h), (240, 240, 240))
        ImageDraw.Draw(im).rectangle([4 + 3 * i, 6, 30 + 3 * i, 40], fill=(200, 30, 30))
        im.save(root / f"im{i}.png")
        out.append(Sample(id=f"g{i}", image_path=root / f"im{i}.png", task="grounding", expression=expr,
                          box=(4.0 + 3 * i, 6.0, 30.0 + 3 * i, 40.0)))
    return out


def _conditions(lm):
    L, H = lm.num_layers, lm.num_heads
    controls = cond.random_controls(L, H, 2, [0, 1, 2], outside=[(0, 0), (1, 1)], method="m")
    return [cond.none(), cond.explicit([(0, 0)], label="top1"), cond.explicit([(0, 0), (1, 1)], label="top2"),
            cond.explicit([(0, 0)], label="same-as-top1"), *controls.conditions,
            cond.explicit([(0, 0), (1, 1)], mask_mode="uniform", label="top2-uniform")]


SUBSETS = {"random2:s2": ["g1", "g3"]}


def _run(path, lm, samples, batched, resume=False):
    with runs.RunFolder(path, resume=resume) as run:
        run.write_config({"command": "evaluate"})  # a vrh run folder: what --resume continues
        return run_conditions(lm, get_task("grounding"), samples, _conditions(lm), run, subsets=SUBSETS,
                              batch_conditions=batched, **KW)


def _lines(path):
    return sorted(json.dumps(r, sort_keys=True) for r in runs.read_jsonl(path / runs.SAMPLES))


@pytest.fixture(scope="module")
def sequential(tmp_path_factory, lm, samples):
    path = tmp_path_factory.mktemp("seq") / "run"
    return path, _run(path, lm, samples, batched=False)


def test_batched_conditions_write_what_one_at_a_time_writes(tmp_path, monkeypatch, lm, samples, sequential):
    seq_path, seq = sequential
    batches = []
    real = evaluation.answer_and_judge
    monkeypatch.setattr(evaluation, "answer_and_judge",
                        lambda lm_, task, ss, n: batches.append([s.id for s in ss]) or real(lm_, task, ss, n))
    res = _run(tmp_path / "run", lm, samples, batched=True)

    assert _lines(tmp_path / "run") == _lines(seq_path)
    assert res.summaries == seq.summaries and res.records == seq.records
    assert (res.n_generated, res.n_evaluations) == (seq.n_generated, seq.n_evaluations) == (4 * 5 + 2 + 4, 7)
    # zero-mode rows (5 head sets x 4 samples + 2 subset rows) in full batches of 4, then the uniform set alone
    assert [len(b) for b in batches] == [4] * 5 + [2] + [4]
    assert batches[0] == ["g0"] * 4  # sample-major: a sample's head sets share a batch
    # the masks matter on this model, so rows with swapped or ignored masks could not pass the comparison
    preds = {label: [r["pred_text"] for r in recs] for label, recs in seq.records.items()}
    assert len({tuple(p) for p in preds.values()}) >= 3


def test_batched_resume_after_a_crash_generates_only_the_missing_rows(tmp_path, monkeypatch, lm, samples,
                                                                    sequential):
    real, rows = evaluation.answer_and_judge, []

    def crashing(lm_, task, ss, n):
        if len(rows) >= 8:
            raise KeyboardInterrupt("simulated crash")
        rows.extend(s.id for s in ss)
        return real(lm_, task, ss, n)

    monkeypatch.setattr(evaluation, "answer_and_judge", crashing)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "run", lm, samples, batched=True)
    assert len(runs.read_jsonl(tmp_path / "run" / runs.SAMPLES)) > 8  # shared keys wrote several labels

    rows.clear()
    monkeypatch.setattr(evaluation, "answer_and_judge",
                        lambda lm_, task, ss, n: rows.extend(s.id for s in ss) or real(lm_, task, ss, n))
    res = _run(tmp_path / "run", lm, samples, batched=True, resume=True)
    assert len(rows) == res.n_generated == (4 * 5 + 2 + 4) - 8
    assert _lines(tmp_path / "run") == _lines(sequential[0])
    assert res.summaries == sequential[1].summaries


# --- a mode batches only through its own per-row application -------------------------------------------
def _negate_hooks(model, adapter, masked_by_layer, subset=None):
    """``{layer: o_proj pre-hook}`` negating, in row b, the heads where ``masked_by_layer[layer][b]`` is True
    (``[B, H]`` bool); with ``subset.rows`` set, the call holds only those rows."""
    num_heads, head_dim = adapter.num_heads(model), adapter.head_dim(model)

    def hook_for(masked):
        def hook(module, args, kwargs):
            x = args[0]
            m = masked.to(x.device)
            if subset is not None and subset.rows is not None:
                m = m[subset.rows.to(x.device)]
            m = m[:, None, :, None] if x.dim() == 3 else m[:, None]  # [B, H] -> [B, 1, H, 1]
            per_head = x.reshape(*x.shape[:-1], num_heads, head_dim)  # [B, S, H*d] -> [B, S, H, d]
            return (torch.where(m, -per_head, per_head).reshape(x.shape), *args[1:]), kwargs

        return hook

    return {layer: hook_for(m) for layer, m in masked_by_layer.items()}


def _masked(model, adapter, row_heads):
    out = {}
    for b, heads in enumerate(row_heads):
        for layer, head in heads:
            out.setdefault(layer, torch.zeros(len(row_heads), adapter.num_heads(model), dtype=torch.bool))
            out[layer][b, head] = True
    return out


@contextmanager
def _negate(model, adapter, heads):
    with masking._o_proj_pre_hooks(model, adapter, _negate_hooks(model, adapter, _masked(model, adapter, [heads]))):
        yield


@contextmanager
def _negate_rows(model, adapter, row_heads, subset=None):
    hooks = _negate_hooks(model, adapter, _masked(model, adapter, row_heads), subset)
    with masking._o_proj_pre_hooks(model, adapter, hooks):
        yield


@pytest.fixture
def negate_mode(monkeypatch):
    """A throwaway mode (the heads' outputs negated) with its own per-row application, registered for one test."""
    monkeypatch.setattr(masking, "_MODES", dict(masking._MODES))
    masking.register_mask_mode("negate_test", help="its output negated", per_row=_negate_rows)(_negate)
    return "negate_test"


def _mode_conditions(mode):
    return [cond.none(), cond.explicit([(0, 0)], mask_mode=mode, label="a"),
            cond.explicit([(0, 0), (1, 1)], mask_mode=mode, label="b"),
            cond.explicit([(0, 1)], label="zero-c"), cond.explicit([(0, 0), (1, 1)], label="zero-b")]


def test_a_per_row_mode_batched_writes_bitwise_what_it_writes_alone(tmp_path, monkeypatch, lm, samples,
                                                                    negate_mode):
    rows_calls = []
    real = evaluation.evaluate_rows
    monkeypatch.setattr(runner, "evaluate_rows",
                        lambda *a, **kw: rows_calls.append(kw.get("mask_modes")) or real(*a, **kw))
    out = {}
    for batched in (True, False):
        with runs.RunFolder(tmp_path / str(batched)) as run:
            run.write_config({"command": "evaluate"})
            out[batched] = run_conditions(lm, get_task("grounding"), samples, _mode_conditions(negate_mode), run,
                                          batch_conditions=batched, **KW)
    assert _lines(tmp_path / "True") == _lines(tmp_path / "False")  # every record, byte for byte
    assert out[True].records == out[False].records
    # the mode's rows went through the batched path, mixed with zero-mode rows of the same samples
    assert len(rows_calls) == 1 and rows_calls[0].count(negate_mode) == 2 * len(samples)
    preds = {label: [r["pred_text"] for r in recs] for label, recs in out[False].records.items()}
    assert preds["b"] != preds["zero-b"]  # negating is not zeroing on this model: a zero fallback could not pass


def test_a_mode_without_a_per_row_application_is_not_batchable(lm, samples):
    uniform = masking.get_mask_mode("uniform")
    # the case: uniform re-registered as batchable gave zero's answers when conditions shared a batch
    with pytest.raises(ValueError, match="per-row application"):
        masking.register_mask_mode("uniform_batched", batchable=True, help=uniform.help)(uniform.apply)
    assert "uniform_batched" not in masking.mask_mode_names()
    assert not uniform.batchable and uniform.apply_rows is None
    plan = plan_conditions(lm, get_task("grounding"), samples, [cond.explicit([(0, 0)], mask_mode="uniform")],
                           settings=GenerationOptions(**KW))
    assert plan.rows == [] and list(plan.rank_samples) == [0]  # one head set at a time
    with pytest.raises(ValueError, match="no per-row application"):
        evaluation.evaluate_rows(lm, get_task("grounding"), [(samples[0], [(0, 0)])], mask_modes=["uniform"], **KW)
