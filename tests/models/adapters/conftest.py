"""Fixtures shared by the per-family adapter tests."""

from __future__ import annotations

import pytest

from vrh import runs
from vrh.testing import save_tiny


@pytest.fixture
def detect_then_evaluate(tmp_path, tiny_dataset):
    """``run(build, n)``: save the tiny checkpoint ``build()`` returns, run ``vrh detect`` on ``n`` grounding
    samples of the shared tiny dataset (GT answers), then ``vrh evaluate`` on ``n`` held-out ones with the
    top 2 heads it found masked. Returns detect's summary, its ``samples.jsonl`` records and evaluate's
    ``results.json``: what each family's end-to-end test asserts on."""

    def run(build, n: int) -> tuple[dict, list[dict], dict]:
        from vrh.analyses import detect, evaluate

        model, processor = build()
        ckpt = str(save_tiny(model, processor, tmp_path / "ckpt"))
        det, ev = tmp_path / "det", tmp_path / "ev"
        out = detect.run(detect.Config(model=ckpt, data=tiny_dataset, out=str(det), n=n, answer="gt", batch_size=2,
                                       max_new_tokens=4))
        evaluate.run(evaluate.Config(model=ckpt, data=tiny_dataset, out=str(ev), n=n, batch_size=2, max_new_tokens=4,
                                     mask_heads=str(det), k=2))
        return out, runs.read_jsonl(det / runs.SAMPLES), runs.read_json(ev / runs.RESULTS)

    return run
