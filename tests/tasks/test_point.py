"""The point task (RefSpatial-Bench's own metric): points read from the answer, judged inside the mask (the
RefSpatial --task point conversion is tested in tests/data/sources/test_toloka_refspatial_sources.py)."""

import json

import pytest
from PIL import Image

from vrh.data import load_dataset
from vrh.tasks import get_task, task_from_settings
from vrh.tasks.point import parse_points

W, H = 40, 20
MASK = (10, 4, 20, 12)  # xyxy: columns 10..19, rows 4..11 are the target


class VQAOnlyAdapter:
    def vqa_prompt(self, question):
        return f"Q: {question}"


@pytest.fixture
def point_sample(tmp_path):
    Image.new("RGB", (W, H), "gray").save(tmp_path / "im.png")
    m = Image.new("L", (W, H), 0)
    m.paste(255, MASK)
    m.save(tmp_path / "mask.png")
    line = {"id": "p1", "image": "im.png", "task": "point", "question": "Point to the cup. Answer (x, y) in 0-1.",
            "mask": "mask.png"}
    (tmp_path / "d.jsonl").write_text(json.dumps(line) + "\n")
    [s] = load_dataset(tmp_path / "d.jsonl")
    return s


def test_point_lines_load_with_the_mask_resolved(point_sample, tmp_path):
    assert point_sample.task == "point" and point_sample.answer is None
    assert point_sample.meta["mask"] == str((tmp_path / "mask.png").resolve())
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": "p", "image": "im.png", "task": "point", "question": "q"}))
    with pytest.raises(ValueError, match="'mask' must be a non-empty path string"):
        load_dataset(tmp_path / "bad.jsonl")


@pytest.mark.parametrize("text, outcome, score", [
    ("[(0.375, 0.4)]", "correct", 1.0),  # (15, 8) px: inside
    ("(0.25, 0.5)", "correct", 1.0),  # (10, 10) px: x = 10 is the mask's first column (pixel i spans [i, i+1))
    ("(0.2, 0.5)", "outside", 0.0),  # (8, 10) px
    ("[(0.375, 0.4), (0.9, 0.9)]", "outside", 0.5),  # one of two inside: the benchmark's score is 0.5
    ("I am not sure.", "parse_failure", 0.0),
    ("[0.1, 0.2, 0.3, 0.4]", "parse_failure", 0.0),  # a box is not a point
    ("(1.2, 0.5)", "outside", 0.0),  # off the image
])
def test_point_judge(point_sample, text, outcome, score):
    rec = get_task("point").judge(VQAOnlyAdapter(), point_sample, text, {})
    assert rec["outcome"] == outcome and rec["score"] == pytest.approx(score)
    assert rec["question"] == point_sample.question and len(rec["points"]) == len(parse_points(text))


def test_pixel_edges_and_frames(point_sample):
    task = get_task("point", frame="pixel")
    assert task.judge(None, point_sample, "(9.99, 8)", {})["outcome"] == "outside"  # column 9 is off the mask
    assert task.judge(None, point_sample, "(19.99, 11.5)", {})["outcome"] == "correct"
    assert task.judge(None, point_sample, "(20, 8)", {})["outcome"] == "outside"
    assert get_task("point", frame="norm1000").judge(None, point_sample, "(375, 400)", {})["outcome"] == "correct"
    with pytest.raises(ValueError, match="'frame' must be one of norm, norm1000, pixel"):
        get_task("point", frame="percent")


def test_prompt_summary_and_settings(point_sample):
    task = get_task("point")
    assert task.prompt(VQAOnlyAdapter(), point_sample) == "Q: " + point_sample.question
    recs = [task.judge(None, point_sample, t, {}) for t in ["(0.375, 0.4)", "[(0.375, 0.4), (0.9, 0.9)]", "none"]]
    s = task.summarize(recs)
    assert s["accuracy"] == pytest.approx(1 / 3) and s["point_accuracy"] == pytest.approx(0.5)
    assert s["counts"] == {"correct": 1, "outside": 1, "parse_failure": 1} and s["mean_iou"] is None
    # the grounding options a command offers (tau, clip) are not the point task's
    assert task_from_settings("point", {"tau": 0.5, "clip": True}).config() == {"name": "point", "frame": "norm"}
