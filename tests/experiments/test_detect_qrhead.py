"""QRHead inside detection: its null-query ('N/A') pass runs once per batch, only when requested, and the
calibrated scores match a recomputation from separate captures written here."""

import json
from pathlib import Path

import numpy as np
import torch

from vrh import runs
from vrh.baselines import qrhead_sample
from vrh.capture import capture_attention_rows
from vrh.data import load_dataset
from vrh.experiments.detect import NULL_QUERY, DetectConfig, detect
from vrh.experiments.evaluate import load_image
from vrh.inference import load_model
from vrh.regions import box_token_mask


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


def test_qrhead_null_pass_through_detect(tmp_path, tiny_checkpoint, tiny_dataset):
    lm = load_model(tiny_checkpoint)
    out = tmp_path / "det"
    data = _varied_expressions(tiny_dataset, tmp_path)
    hs = detect(DetectConfig(model=tiny_checkpoint, data=data, out=str(out), n=3, n_eval=2, batch_size=2,
                             max_new_tokens=8, scorers=("out/sum/mean", "qrhead")), lm)
    assert (hs["capture_batches"], hs["capture_forwards"], hs["null_capture_forwards"]) == (2, 2, 2)

    by_id = {s.id: s for s in load_dataset(data)}
    recs = runs.read_jsonl(out / runs.SAMPLES)[:2]  # the first batch
    chunk = [by_id[r["id"]] for r in recs]
    images = [load_image(s) for s in chunk]
    answers = [r["scored_answer"] for r in recs]
    batch, rows = _expression_rows(lm, images, [lm.adapter.grounding_prompt(s.expression) for s in chunk], answers,
                                   [s.expression for s in chunk])
    nbatch, nrows = _expression_rows(lm, images, [lm.adapter.grounding_prompt(NULL_QUERY)] * 2, answers,
                                     [NULL_QUERY] * 2)
    got = np.load(out / "sample_scores.npz")["qrhead"]  # (N, L, H)
    shifted = 0
    for b, s in enumerate(chunk):
        in_box = box_token_mask(batch.visual_rects[b], s.box, 0.0)
        keys, null_keys = batch.visual_positions[b][in_box], nbatch.visual_positions[b][in_box]
        shifted += not torch.equal(keys, null_keys)
        E, En = rows[b].shape[2], nrows[b].shape[2]
        want = qrhead_sample(rows[b], keys, range(E), nrows[b], null_keys, range(En))
        raw = qrhead_sample(rows[b], keys, range(E), calibrate=False)
        assert torch.allclose(torch.from_numpy(got[b]), want, atol=1e-6)
        assert (want - raw).abs().max() > 1e-4  # the null pass really entered the score
    assert shifted  # the null pass's own key positions were needed

    plain = detect(DetectConfig(model=tiny_checkpoint, data=tiny_dataset, out=str(tmp_path / "plain"), n=2,
                                batch_size=2, max_new_tokens=8, scorers=("out/sum/mean",)), lm)
    assert (plain["capture_batches"], plain["capture_forwards"], plain["null_capture_forwards"]) == (1, 1, 0)
