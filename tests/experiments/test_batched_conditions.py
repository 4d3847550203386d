"""Several masking conditions per batch: the runner's batched path writes exactly what the one-head-set-at-a-
time path writes (same records, tags, summaries; only line order differs), on a real tiny Qwen2.5-VL with
left-padded batches (images and expressions of different sizes), subsets, a shared key, a uniform
condition (which runs alone) and a resume after a crash."""

import json

import pytest
from PIL import Image, ImageDraw

import vrh.experiments.evaluation as evaluation
from vrh.experiments import conditions as cond
from vrh import runs
from vrh.models.adapters import get_adapter
from vrh.data import Sample
from vrh.models.loading import LoadedModel
from vrh.experiments.runner import run_conditions
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
