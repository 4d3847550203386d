"""vrh dpo: the App. B loop's wiring on the tiny checkpoint (pairs x2, trainings x2, three evaluations), with
generation stood in for so that the models differ in a known way (the tiny random model never answers right)."""

import pytest

pytest.importorskip("trl")

from vrh import runs  # noqa: E402
from vrh.analyses import dpo  # noqa: E402
from vrh.data import boxes as grounding  # noqa: E402
from vrh.experiments import runner  # noqa: E402

TRAIN = dict(lr=1e-3, max_steps=1, train_batch_size=2, grad_accum=1, max_new_tokens=8, batch_size=4)


@pytest.fixture
def fake_generation(monkeypatch):
    """Unmasked answers: the base model is right on even-numbered samples, DPO-VRH on all, DPO-random on none;
    masked answers are always wrong and differ from the unmasked ones."""
    seen = []

    def fake_evaluate(lm, task, samples, heads=(), *, on_record=None, finished=None, **kw):
        seen.append(lm.path)
        out = []
        for s in samples:
            i = int(s.id.lstrip("g"))
            right = not heads and ("train_vrh" in lm.path or ("train_random" not in lm.path and i % 2 == 0))
            out.append({"id": s.id, "pred_text": f"({i},0),(9,9)" if not heads else "(0,0),(1,1)",
                        "outcome": grounding.CORRECT if right else grounding.MISLOCATED, "iou": 0.9 if right else 0.0})
            if on_record is not None:
                on_record(out[-1])
        return out

    def fake_rows(lm, task, rows, *, on_record=None, **kw):
        recs = [fake_evaluate(lm, task, [s], hs)[0] for s, hs in rows]
        for i, rec in enumerate(recs):
            on_record(i, rec)
        return recs

    monkeypatch.setattr(runner, "evaluate_samples", fake_evaluate)
    monkeypatch.setattr(runner, "evaluate_rows", fake_rows)
    return seen


def test_dpo_loop_writes_fig_a3_from_three_held_out_evaluations(tmp_path, tiny_checkpoint, det_run, tiny_lm,
                                                               fake_generation):
    out = tmp_path / "dpo"
    res = dpo.run(dpo.Config(model=tiny_checkpoint, heads=str(det_run), k=2, out=str(out), **TRAIN), tiny_lm)
    split = runs.read_detection_split(det_run)
    assert res["models"] == ["base", "dpo-random", "dpo-vrh"]
    (name, bench), = res["benchmarks"].items()
    assert bench["n"] == len(split.eval_ids)
    expected_base = sum(int(i.lstrip("g")) % 2 == 0 for i in split.eval_ids) / len(split.eval_ids)
    assert bench["accuracy"] == {"base": expected_base, "dpo-random": 0.0, "dpo-vrh": 1.0}
    assert bench["differences"][0] == {"a": "dpo-vrh", "b": "base", "diff": pytest.approx(1 - expected_base),
                                       "se": pytest.approx(bench["differences"][0]["se"])}
    # pairs only where the base was right: even-numbered detection samples
    n_even = sum(int(i.lstrip("g")) % 2 == 0 for i in split.detect_ids)
    assert res["pairs"]["vrh"]["n_pairs"] == res["pairs"]["random"]["n_pairs"] == n_even
    assert set(runs.read_config(out)["subruns"]) == {p.name for p in out.iterdir() if p.is_dir()}
    assert {runs.read_config(out / s)["command"] for s in res["subruns"]} == {"dpo-pairs", "dpo-train", "evaluate"}
    trained = {runs.read_results(out / f"train_{p}")["model_dir"] for p in ("vrh", "random")}
    assert trained <= set(fake_generation)  # the evaluations ran the saved DPO folders
    assert not {r["id"] for r in runs.read_samples(out / f"eval_{name}_dpo-vrh")} & set(split.detect_ids)

    from vrh.analyses.reporting import build_report

    md = build_report([out], tmp_path / "report")["md"].read_text()
    assert "DPO with retrieval heads (Fig. A3)" in md and "| dpo-vrh - base |" in md
    assert "DPO preference pairs" in md  # the pairs' sub-runs: counts, drop reasons, examples

    # resumed: every stage is found finished, nothing is trained or generated again
    fake_generation.clear()
    again = dpo.run(dpo.Config(model=tiny_checkpoint, heads=str(det_run), k=2, out=str(out), resume=True, **TRAIN),
                    tiny_lm)
    assert again["benchmarks"] == res["benchmarks"] and not fake_generation


def test_an_evaluation_benchmark_holding_training_ids_is_refused(tmp_path, tiny_checkpoint, tiny_dataset, det_run,
                                                                tiny_lm):
    """--train data trains on every sample the detection run did not hold out, including those it neither
    scored nor held out; a benchmark holding those (another file, so checked by id) is refused before
    anything runs."""
    import json

    split = runs.read_detection_split(det_run)
    from pathlib import Path

    root = Path(tiny_dataset).parent
    recs = [json.loads(ln) for ln in Path(tiny_dataset).read_text().splitlines()]
    recs = [{**r, "image": str(root / r["image"])} for r in recs if r["id"] not in set(split.detect_ids)]
    bench = tmp_path / "unscored.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "dpo"
    cfg = dpo.Config(model=tiny_checkpoint, heads=str(det_run), k=2, out=str(out), train="data",
                     benchmarks=(str(bench),), **TRAIN)
    with pytest.raises(ValueError, match="are DPO training samples"):
        dpo.run(cfg, tiny_lm)
    assert not out.exists()
