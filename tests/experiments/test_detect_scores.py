"""head_scores.json flags a scorer whose map cannot rank heads (every head scored the same)."""

from types import SimpleNamespace

import torch

from vrh import runs
from vrh.experiments.detect import DetectConfig, _write_scores


class _Stub:
    def __init__(self, scores):
        self.scores = scores

    def result(self):
        return self.scores

    def per_sample(self):
        return self.scores[None]


def test_constant_map_is_warned_about(tmp_path):
    cfg = DetectConfig(model="m", data="d", out=str(tmp_path), scorers=("out/sum/mean", "in/sum/mean"))
    scorers = {"out/sum/mean": _Stub(torch.tensor([[0.1, 0.3], [0.0, 0.2]])),
               "in/sum/mean": _Stub(torch.zeros(2, 2))}
    lm = SimpleNamespace(num_layers=2, num_heads=2)
    with runs.RunFolder(tmp_path / "run") as run:
        out = _write_scores(run, lm, cfg, scorers, {}, [], 0.0, {"main": 1, "null": 0, "batches": 1})
    assert len(out["warnings"]) == 1 and "'in/sum/mean'" in out["warnings"][0]
    assert out["variants"]["out/sum/mean"]["n_positive_heads"] == 3
    assert runs.read_json(tmp_path / "run" / runs.HEAD_SCORES)["warnings"] == out["warnings"]
