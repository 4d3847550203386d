"""The condition runner's bookkeeping, with the model call replaced by a recording fake (the masked
generation itself is tested in tests/commands and tests/core/test_masking.py)."""

import pytest

import vrh.experiments.runner as runner
from vrh.experiments import conditions as cond
from vrh import runs
from vrh.data import Sample
from vrh.tasks import get_task

SAMPLES = [Sample(id=f"s{i}", image_path="x.png", task="vqa", question="q?", answer="a") for i in range(5)]


class _Fake:
    """Stands in for evaluate_samples and evaluate_rows: answers 'a' unless heads are masked; records each
    (head set, mask mode) call and each generated (head set, sample) row."""

    def __init__(self, fail_after: int | None = None):
        self.calls: list[tuple] = []
        self.rows: list[tuple] = []
        self.generated = 0
        self.fail_after = fail_after

    def _answer(self, s, heads):
        if self.fail_after is not None and self.generated >= self.fail_after:
            raise KeyboardInterrupt  # a kill mid-run
        self.generated += 1
        self.rows.append((tuple(heads), s.id))
        return {"id": s.id, "task": "vqa", "pred_text": "b" if heads else "a", "answer": "a",
                "outcome": "wrong" if heads else "correct"}

    def __call__(self, lm, task, samples, heads=(), *, mask_mode, batch_size, max_new_tokens, on_record, advance,
                 finished):
        self.calls.append((tuple(heads), mask_mode))
        out = []
        for s in samples:
            if s.id in finished:
                out.append(finished[s.id])
                continue
            rec = self._answer(s, heads)
            on_record(rec)
            advance(1)
            out.append(rec)
        return out

    def rows_call(self, lm, task, rows, *, batch_size, max_new_tokens, on_record, advance, share_vision=True,
                  share_prefix=True, mask_modes):
        self.calls.extend(sorted({(tuple(hs), m) for (_, hs), m in zip(rows, mask_modes)}))
        out = []
        for i, (s, heads) in enumerate(rows):
            rec = self._answer(s, heads)
            on_record(i, rec)
            advance(1)
            out.append(rec)
        return out


@pytest.fixture(params=[True, False], ids=["batched", "sequential"])
def fake(request, monkeypatch):
    """``fake(fail_after)``: installs a fresh _Fake for both paths; tests run with batch_conditions on and off."""

    def install(fail_after=None):
        f = _Fake(fail_after)
        monkeypatch.setattr(runner, "evaluate_samples", f)
        monkeypatch.setattr(runner, "evaluate_rows", f.rows_call)
        return f

    install.batched = request.param
    return install


def _conditions():
    scores = __import__("torch").tensor([[0.9, 0.1], [0.5, 0.0]])
    return [cond.none(), cond.top_k(scores, 1, method="m", label="top1"),
            cond.explicit([(0, 0)], label="same-as-top1"),
            cond.random_outside(2, 2, 1, 0, outside=[(0, 0)], label="random1:s0")]


def test_each_distinct_head_set_once_and_every_record_tagged(tmp_path, fake):
    f = fake()
    conds = _conditions()
    with runs.RunFolder(tmp_path / "r") as run:
        res = runner.run_conditions(None, get_task("vqa"), SAMPLES, conds, run, batch_conditions=fake.batched)
    assert len(set(f.calls)) == len(f.calls) == 3 and res.n_evaluations == 3 and res.n_generated == 15
    assert len(set(f.rows)) == len(f.rows) == 15  # every (head set, sample) answered once
    lines = runs.read_jsonl(tmp_path / "r" / runs.SAMPLES)
    assert sorted((l["condition"], l["id"]) for l in lines) == sorted((c.label, s.id) for c in conds for s in SAMPLES)
    assert res.summary("none")["accuracy"] == 1.0 and res.summary("same-as-top1")["accuracy"] == 0.0
    assert {l["kind"] for l in lines} == {"none", "top_k", "list", "random"}


def test_resume_generates_only_what_is_missing(tmp_path, fake):
    conds = _conditions()
    first = fake(fail_after=7)
    with pytest.raises(KeyboardInterrupt):
        with runs.RunFolder(tmp_path / "r") as run:
            run.write_config({"command": "evaluate"})  # a vrh run folder: what --resume continues
            runner.run_conditions(None, get_task("vqa"), SAMPLES, conds, run, batch_conditions=fake.batched)
    f = fake()
    with runs.RunFolder(tmp_path / "r", resume=True) as run:
        run.write_config({"command": "evaluate"})
        res = runner.run_conditions(None, get_task("vqa"), SAMPLES, conds, run, batch_conditions=fake.batched)
    assert f.generated == 15 - 7 and res.n_generated == 8
    assert not set(f.rows) & set(first.rows)  # finished (head set, sample) rows are not generated again
    lines = runs.read_jsonl(tmp_path / "r" / runs.SAMPLES)
    keys = [(l["condition"], l["id"]) for l in lines]
    assert len(keys) == len(set(keys)) == 20  # every (condition, sample) exactly once


def test_duplicate_labels_are_refused():
    with pytest.raises(ValueError, match="unique"):
        runner.run_conditions(None, get_task("vqa"), SAMPLES, [cond.none(), cond.none()])


def test_subsets_restrict_a_condition_to_some_samples(tmp_path, fake):
    fake()
    conds = _conditions()
    with runs.RunFolder(tmp_path / "r") as run:
        res = runner.run_conditions(None, get_task("vqa"), SAMPLES, conds, run, batch_conditions=fake.batched,
                                    subsets={"top1": ["s0", "s1"], "same-as-top1": ["s1", "s2"], "random1:s0": ["s4"]})
    assert [r["id"] for r in res.records["top1"]] == ["s0", "s1"]
    assert [r["id"] for r in res.records["same-as-top1"]] == ["s1", "s2"]
    assert res.n_generated == 5 + 3 + 1  # the shared head set answers s0..s2 once
    lines = runs.read_jsonl(tmp_path / "r" / runs.SAMPLES)
    assert len(lines) == 5 + 2 + 2 + 1
    with pytest.raises(ValueError, match="not given"):
        runner.run_conditions(None, get_task("vqa"), SAMPLES, conds, subsets={"top1": ["zz"]})


def test_batched_rows_are_sample_major_uniform_sets_run_alone_and_progress_counts_rows(monkeypatch):
    f, seen, ticks = _Fake(), {}, []

    def rows_call(lm, task, rows, **kw):
        seen["rows"] = [(s.id, tuple(hs)) for s, hs in rows]
        return f.rows_call(lm, task, rows, **kw)

    class _Progress:
        def __init__(self, total, description, unit="samples"):
            ticks.append(total)

        def __enter__(self):
            return ticks.append

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(runner, "evaluate_rows", rows_call)
    monkeypatch.setattr(runner, "evaluate_samples", f)
    monkeypatch.setattr(runner, "progress_bar", _Progress)
    conds = [cond.none(), cond.explicit([(0, 0)], label="a"), cond.explicit([(1, 1)], mask_mode="uniform", label="u")]
    res = runner.run_conditions(None, get_task("vqa"), SAMPLES[:2], conds, batch_size=3)
    assert seen["rows"] == [("s0", ()), ("s0", ((0, 0),)), ("s1", ()), ("s1", ((0, 0),))]
    assert f.calls[-1] == (((1, 1),), "uniform")  # the uniform head set went through the one-set-at-a-time path
    assert ticks[0] == 6 and sum(ticks[1:]) == 6  # total and advances: 3 head sets x 2 samples, in rows
    assert [r["id"] for r in res.records["u"]] == ["s0", "s1"] and res.n_generated == 6


def test_the_generation_settings_are_one_value_or_the_same_keywords(monkeypatch):
    """run_conditions takes how it generates as one value (a command passes its own settings, which carry the
    generation options) or as the same keywords; every model call gets them, and a keyword that names no
    option is a TypeError naming the ones it takes."""
    from vrh.experiments.settings import SweepSettings
    from vrh.options import GenerationOptions

    f, seen = _Fake(), []

    def samples_call(*args, batch_size, max_new_tokens, **kw):
        seen.append((batch_size, max_new_tokens))
        return f(*args, batch_size=batch_size, max_new_tokens=max_new_tokens, **kw)

    def rows_call(*args, batch_size, max_new_tokens, **kw):
        seen.append((batch_size, max_new_tokens))
        return f.rows_call(*args, batch_size=batch_size, max_new_tokens=max_new_tokens, **kw)

    monkeypatch.setattr(runner, "evaluate_samples", samples_call)
    monkeypatch.setattr(runner, "evaluate_rows", rows_call)
    conds = [cond.none(), cond.explicit([(0, 0)], label="a"), cond.explicit([(1, 1)], mask_mode="uniform", label="u")]
    task = get_task("vqa")
    command = SweepSettings(model="m", data="d", heads="h", out="o", batch_size=3, max_new_tokens=7)
    results = [runner.run_conditions(None, task, SAMPLES, conds, None, GenerationOptions(batch_size=3, max_new_tokens=7)),
               runner.run_conditions(None, task, SAMPLES, conds, batch_size=3, max_new_tokens=7),
               runner.run_conditions(None, task, SAMPLES, conds, None, command),
               runner.run_conditions(None, task, SAMPLES, conds, None, GenerationOptions(batch_size=2), batch_size=3,
                                     max_new_tokens=7)]
    assert set(seen) == {(3, 7)} and len(seen) == 2 * len(results)  # the batched rows and the uniform set, each run
    assert all(r.summaries == results[0].summaries for r in results)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['batch'\]; it takes "
                                        "GenerationOptions's fields: batch_size, max_new_tokens"):
        runner.run_conditions(None, task, SAMPLES, conds, batch=3)
