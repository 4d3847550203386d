"""Detection (vrh.experiments.detection): the extra capture pass runs once per batch only when a scorer asks for it,
QRHead's calibrated scores match a recomputation from separate captures, overlays count samples, and a
constant score map is flagged."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from vrh import runs
from vrh.core.capture import capture_attention_rows
from vrh.data import load_dataset
from vrh.experiments.detection import _finish, detect_heads
from vrh.experiments.detection_batch import NULL_QUERY, BatchState
from vrh.models.loading import load_model
from vrh.core.regions import box_token_mask
from vrh.scoring.qrhead import qrhead_sample


def _expression_rows(lm, images, prompts, answers, expressions):
    """Rows of the expression tokens only, captured in a forward of this test's own."""
    batch = lm.adapter.build_batch(lm.processor, images, prompts, answers=answers, expressions=expressions)
    pos = batch.expression_positions
    with torch.no_grad(), capture_attention_rows(lm.model, lm.adapter, pos) as cap:
        lm.model(**batch.inputs)
    return batch, [cap.rows(b) for b in range(len(images))]  # per sample (L, H, E, S)


def _varied_expressions(tiny_dataset, tmp_path):
    """The tiny grounding samples with expressions of different lengths: the main pass then left-pads each
    sample differently from the null pass, so the null pass's key positions differ from the main ones."""
    rows = [json.loads(line) for line in Path(tiny_dataset).read_text().splitlines()]
    for i, r in enumerate(rows):
        r["image"] = str(Path(tiny_dataset).parent / r["image"])
        if r["task"] == "grounding":
            r["expression"] = "the red box" + " that sits in the picture" * (i % 3)
    path = tmp_path / "varied.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_qrhead_null_pass_through_detection(tmp_path, tiny_checkpoint, tiny_dataset):
    lm = load_model(tiny_checkpoint)
    data = _varied_expressions(tiny_dataset, tmp_path)
    samples = [s for s in load_dataset(data) if s.task == "grounding"][:3]
    det = detect_heads(lm, samples, scorers=("out/sum/mean", "qrhead"), batch_size=2, max_new_tokens=8)
    hs = det.head_scores
    assert (hs.extra["capture_batches"], hs.extra["capture_forwards"], hs.extra["extra_capture_forwards"]) == \
        (2, 2, {"null_query": 2})

    chunk, recs = samples[:2], det.records[:2]  # the first batch
    images = [s.load_image() for s in chunk]
    answers = [r["scored_answer"] for r in recs]
    batch, rows = _expression_rows(lm, images, [lm.adapter.grounding_prompt(s.expression) for s in chunk], answers,
                                   [s.expression for s in chunk])
    nbatch, nrows = _expression_rows(lm, images, [lm.adapter.grounding_prompt(NULL_QUERY)] * 2, answers,
                                     [NULL_QUERY] * 2)
    got = det.per_sample["qrhead"]  # (N, L, H)
    shifted = calibrated = 0
    for b, s in enumerate(chunk):
        in_box = box_token_mask(batch.visual_rects[b], s.box, 0.0)
        keys, null_keys = batch.visual_positions[b][in_box], nbatch.visual_positions[b][in_box]
        shifted += not torch.equal(keys, null_keys)
        E, En = rows[b].shape[2], nrows[b].shape[2]
        want = qrhead_sample(rows[b], keys, range(E), nrows[b], null_keys, range(En))
        raw = qrhead_sample(rows[b], keys, range(E), calibrate=False)
        assert torch.allclose(torch.from_numpy(got[b]), want, atol=1e-6)
        # the null pass really entered the score (one key in K: the reference keeps nothing, NaN std -> 0)
        if len(keys) >= 2:
            assert (want - raw).abs().max() > 1e-4
            calibrated += 1
    assert calibrated  # at least one sample where the null pass must change the score
    assert shifted  # the null pass's own key positions were needed

    plain = detect_heads(lm, samples[:2], scorers=("out/sum/mean", "qrhead:calibrate=false"), batch_size=2,
                         max_new_tokens=8, n_overlays=1).head_scores
    assert (plain.extra["capture_batches"], plain.extra["capture_forwards"], plain.extra["extra_capture_forwards"]) \
        == (1, 1, {})
    assert set(plain.variants) == {"out/sum/mean", "qrhead:calibrate=false"}


def test_n_overlays_counts_samples_not_arrays(tiny_checkpoint, tiny_dataset):
    lm = load_model(tiny_checkpoint)
    samples = [s for s in load_dataset(tiny_dataset) if s.task == "grounding"][:4]
    det = detect_heads(lm, samples, batch_size=4, max_new_tokens=8, n_overlays=3)
    assert list(det.overlays) == [s.id for s in samples[:3]]
    att, rects = det.overlays[samples[0].id]
    assert att.ndim == 3 and rects.shape == (att.shape[2], 4)  # (L, H, V), (V, 4)


class _Stub:
    extra_passes = ()

    def __init__(self, scores):
        self.scores = scores

    def result(self):
        return self.scores

    def per_sample(self):
        return self.scores[None]


def test_constant_map_is_warned_about(tmp_path):
    scorers = {"out/sum/mean": _Stub(torch.tensor([[0.1, 0.3], [0.0, 0.2]])), "in/sum/mean": _Stub(torch.zeros(2, 2))}
    whole = BatchState([], [], [], {"main": 1, "batches": 1}, {}, {})
    det = _finish(SimpleNamespace(num_layers=2, num_heads=2), scorers, whole, 0.0)
    hs = det.head_scores
    assert len(hs.warnings) == 1 and "'in/sum/mean'" in hs.warnings[0]
    assert hs.variants["out/sum/mean"]["n_positive_heads"] == 3
    with runs.RunFolder(tmp_path / "run") as run:
        runs.write_head_scores(run, hs)
    assert runs.read_head_scores(tmp_path / "run").warnings == hs.warnings


def test_head_scores_record_the_variant_that_ran(tiny_checkpoint, tiny_dataset):
    lm = load_model(tiny_checkpoint)
    samples = [s for s in load_dataset(tiny_dataset) if s.task == "grounding"][:2]
    hs = detect_heads(lm, samples, scorers=("ocr_heads", "qrhead:calibrate=false"), batch_size=2,
                      max_new_tokens=8).head_scores
    assert hs.variants["ocr_heads"]["options"]["keys"] == "prompt"  # the reference variant by default
    assert hs.variants["qrhead:calibrate=false"]["options"]["calibrate"] is False


def test_detect_ids_file_overrides_the_seeded_draw(tmp_path, tiny_dataset):
    from vrh.experiments.detection import detection_split
    from vrh.options import DetectOptions

    ids = tmp_path / "ids.txt"
    ids.write_text("# chosen by hand\ng3\n\ng7  # trailing comment\n")
    det, held, _ = detection_split(tiny_dataset, DetectOptions(detect_ids=str(ids)))
    assert [s.id for s in det] == ["g3", "g7"]  # --n (200 by default) is replaced by the list
    assert len(held) == 10 and not {s.id for s in held} & {"g3", "g7"}
    _, capped, _ = detection_split(tiny_dataset, DetectOptions(detect_ids=str(ids), n_eval=4, seed=1))
    assert len(capped) == 4 and {s.id for s in capped} <= {s.id for s in held}
    seeded, _, _ = detection_split(tiny_dataset, DetectOptions(n=2))
    assert [s.id for s in seeded] != ["g3", "g7"]
    for text, match in [("g3\nq1\n", r"not grounding samples .*\['q1'\]"), ("g3\ng3\n", r"twice: \['g3'\]"),
                        ("# none\n", "lists no sample id")]:
        ids.write_text(text)
        with pytest.raises(ValueError, match=match):
            detection_split(tiny_dataset, DetectOptions(detect_ids=str(ids)))
    with pytest.raises(FileNotFoundError, match="--detect-ids: no such file"):
        detection_split(tiny_dataset, DetectOptions(detect_ids=str(tmp_path / "nope.txt")))


# --- crash safety: kept batches, kill -9, out of memory --------------------------------------------------
def _same_detection(a, b):
    """Equal head scores (every field but timing), per-sample maps, overlays and records."""
    ja, jb = a.head_scores.to_json(), b.head_scores.to_json()
    ja.pop("elapsed_seconds"), jb.pop("elapsed_seconds")
    assert ja == jb
    assert set(a.per_sample) == set(b.per_sample)
    assert all((a.per_sample[k] == b.per_sample[k]).all() for k in a.per_sample)
    assert set(a.overlays) == set(b.overlays) and all((x == y).all() for k in a.overlays
                                                      for x, y in zip(a.overlays[k], b.overlays[k]))
    assert a.records == b.records


def test_an_interrupted_detection_resumes_from_its_kept_batches(tmp_path, monkeypatch, tiny_checkpoint,
                                                                 tiny_dataset):
    import vrh.experiments.detection

    lm = load_model(tiny_checkpoint)
    samples = [s for s in load_dataset(tiny_dataset) if s.task == "grounding"][:5]
    kw = dict(scorers=("out/sum/mean", "rand1/sum/mean", "ocr_heads"), batch_size=2, max_new_tokens=6, n_overlays=3)
    whole = detect_heads(lm, samples, **kw)

    real, calls, crash = vrh.experiments.detection.detect_batch, [], [True]

    def crash_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2 and crash and crash.pop():
            raise KeyboardInterrupt("simulated crash")
        return real(*args, **kwargs)

    monkeypatch.setattr(vrh.experiments.detection, "detect_batch", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        detect_heads(lm, samples, state_dir=tmp_path, **kw)
    assert sorted(runs.read_batch_states(tmp_path)) == [0]
    calls.clear()
    resumed = detect_heads(lm, samples, state_dir=tmp_path, **kw)
    assert len(calls) == 2  # batches 1 and 2 only
    _same_detection(resumed, whole)
    with pytest.raises(ValueError, match="other samples"):  # kept batches of another plan are refused
        detect_heads(lm, samples[1:], state_dir=tmp_path, **kw)


@pytest.mark.parametrize("one_pass,answering", [(True, "generate_with_rows"), (False, "generate_answers")])
def test_out_of_memory_retries_the_batch_in_halves(monkeypatch, tiny_checkpoint, tiny_dataset, one_pass, answering):
    import vrh.experiments.detection_batch
    import vrh.experiments.evaluation
    import vrh.infra.console
    from vrh.experiments.evaluation import evaluate_samples
    from vrh.tasks import get_task

    lm = load_model(tiny_checkpoint)
    samples = [s for s in load_dataset(tiny_dataset) if s.task == "grounding"][:4]
    kw = dict(scorers=("out/sum/mean",), max_new_tokens=6, n_overlays=2, one_pass=one_pass)
    single = detect_heads(lm, samples, batch_size=1, **kw)
    said = []
    monkeypatch.setattr(vrh.infra.console.console, "print", lambda *a, **k: said.append(" ".join(map(str, a))))
    real = getattr(vrh.experiments.detection_batch, answering)  # the call that answers a batch in this mode

    def small_only(lm_, images, *args, **kwargs):
        if len(images) > 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(lm_, images, *args, **kwargs)

    monkeypatch.setattr(vrh.experiments.detection_batch, answering, small_only)
    halved = detect_heads(lm, samples, batch_size=4, **kw)
    _same_detection(halved, single)  # halves down to one sample: the batches of a batch_size=1 run
    assert any("out of memory on a batch of 4" in s for s in said)
    assert halved.head_scores.extra["capture_batches"] == 4

    monkeypatch.setattr(vrh.experiments.detection_batch, answering, lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):  # any other error is not retried
        detect_heads(lm, samples, batch_size=4, **kw)
    if not one_pass:
        return
    task = get_task("grounding")
    plain = evaluate_samples(lm, task, samples, batch_size=1, max_new_tokens=6)
    real_aj = vrh.experiments.evaluation.answer_and_judge
    monkeypatch.setattr(vrh.experiments.evaluation, "answer_and_judge", lambda lm_, task_, part, n: (
        (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("out of memory")) if len(part) > 1
        else real_aj(lm_, task_, part, n)))
    said.clear()
    assert evaluate_samples(lm, task, samples, batch_size=4, max_new_tokens=6) == plain
    assert any("evaluate: out of memory on a batch of 4" in s for s in said)


def test_detect_killed_with_sigkill_resumes_to_the_uninterrupted_result(tmp_path, kill_mid_run):
    """A real kill -9 of ``vrh detect`` mid-run, then ``--resume``: the run folder equals an uninterrupted
    run's (head scores up to timing, per-sample maps, overlays, samples) and only unfinished batches ran."""
    import os
    import subprocess
    import sys

    import numpy as np

    from vrh.cli import main
    from vrh.organism.world import write_split

    data = write_split(tmp_path / "data", 48, seed=41_000, task="grounding")
    args = ["detect", "--model", "organism", "--data", str(data), "--n", "48", "--n-eval", "0", "--batch-size", "4",
            "--max-new-tokens", "24", "--threads", "1", "--scorers", "out/sum/mean,ocr_heads"]
    out, whole = tmp_path / "killed", tmp_path / "whole"
    env = {**os.environ, "VRH_NO_PROGRESS": "1"}
    cmd = [sys.executable, "-m", "vrh", *args, "--out", str(out)]
    kill_mid_run(cmd, env, lambda: len(runs.read_batch_states(out)) >= 3)
    kept = runs.read_batch_states(out)
    assert 3 <= len(kept) < 12 and not runs.is_finished(out)
    done = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not (out / runs.DETECT_STATE).exists()
    assert main([*args, "--out", str(whole)]) == 0

    a, b = runs.read_json(out / runs.HEAD_SCORES), runs.read_json(whole / runs.HEAD_SCORES)
    assert a.pop("elapsed_seconds") >= 0 and b.pop("elapsed_seconds") >= 0
    assert a == b and a["capture_batches"] == 12
    for name in (runs.SAMPLE_SCORES, runs.OVERLAYS):
        with np.load(out / name) as x, np.load(whole / name) as y:
            assert x.files == y.files and all(np.array_equal(x[k], y[k]) for k in x.files)
    assert runs.read_samples(out) == runs.read_samples(whole)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in whole.iterdir())


def test_the_detection_settings_are_one_value_from_the_options_to_every_batch(tiny_checkpoint, tiny_dataset,
                                                                             monkeypatch):
    """detect_heads hands every batch the one DetectSettings value it was given (the same value the commands
    build from their options); its keywords are a convenience that builds the same value."""
    import vrh.experiments.detection as detection
    from vrh.experiments.settings import DetectSettings

    lm = load_model(tiny_checkpoint)
    samples = [s for s in load_dataset(tiny_dataset) if s.task == "grounding"][:3]
    seen = []
    real = detection.detect_batch
    monkeypatch.setattr(detection, "detect_batch", lambda lm, task, part, settings: seen.append(settings)
                        or real(lm, task, part, settings))
    settings = DetectSettings(scorers=("out/sum/mean", "rand1/sum/mean"), batch_size=2, max_new_tokens=6, seed=3)
    given = detect_heads(lm, samples, settings, progress=False)
    assert seen == [settings, settings]  # two batches of two and one sample, each with the very value
    seen.clear()
    keywords = detect_heads(lm, samples, scorers=["out/sum/mean", "rand1/sum/mean"], batch_size=2, max_new_tokens=6,
                            seed=3, progress=False)
    assert seen == [settings, settings]  # the list a notebook passes is the same value
    for name in settings.scorers:
        assert torch.equal(given.head_scores.scores(name), keywords.head_scores.scores(name))
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['scorer'\]"):
        detect_heads(lm, samples, scorer="out/sum/mean")
