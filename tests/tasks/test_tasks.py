"""The task plugins: registry, prompts through the adapter, judge records, summaries, custom tasks."""

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from PIL import Image

from vrh.data import boxes as grounding
from vrh.data import Sample
from vrh.tasks import Task, get_task, register_task, task_from_settings, task_names
from vrh.tasks.grounding import GroundingTask
from vrh.tasks.vqa import VQATask
from vrh.tasks import base

GT = (8.0, 12.0, 40.0, 44.0)
GROUNDING_KEYS = {"id", "task", "image", "pred_text", "expression", "gt_box", "pred_box", "iou", "outcome"}
VQA_KEYS = {"id", "task", "image", "pred_text", "question", "answer", "answer_type", "answer_rule", "read", "outcome"}


class FakeAdapter:
    """The three adapter methods tasks use. Boxes are read with vrh.data.boxes.parse_box and shifted by
    meta["dx"], so a test can see that the judge hands the adapter its meta and the image size."""

    def __init__(self):
        self.calls = []

    def grounding_prompt(self, expression):
        return f"Where is {expression}?"

    def vqa_prompt(self, question):
        return f"Q: {question}"

    def parse_box(self, text, meta, image_size):
        self.calls.append((text, meta, image_size))
        found = grounding.parse_box(text)
        if found is None:
            return None
        dx = meta.get("dx", 0.0)
        x1, y1, x2, y2 = found[1]
        return (x1 + dx, y1, x2 + dx, y2)


def g_sample(id="g1", image_size=(64, 48), **kw):
    return Sample(id=id, image_path=Path("/data/img/g.png"), task="grounding", expression="the dog", box=GT,
                  image_size=image_size, **kw)


def q_sample(id="q1", answer="red", answer_type="exact"):
    return Sample(id=id, image_path=Path("/data/img/q.png"), task="vqa", question="What colour?", answer=answer,
                  image_size=(32, 32), answer_type=answer_type)


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the registry, so tasks registered by a test do not leak into others (copied once every
    task module is imported: one imported during the test would register into the copy alone)."""
    task_names()
    monkeypatch.setattr(base, "_TASKS", dict(base._TASKS))
    return base._TASKS


# --- registry ------------------------------------------------------------------------------------------


def test_built_in_tasks_are_registered():
    assert {"grounding", "vqa"} <= set(task_names())
    assert list(task_names()) == sorted(task_names())
    g, q = get_task("grounding"), get_task("vqa")
    assert isinstance(g, GroundingTask) and isinstance(q, VQATask)
    assert (g.name, q.name) == ("grounding", "vqa")
    assert g.outcomes == ("correct", "mislocated", "parse_failure")
    assert q.outcomes == ("correct", "wrong", "parse_failure")


def test_unknown_task_lists_registered_ones():
    with pytest.raises(ValueError, match=r"unknown task 'caption'.*grounding, point, vqa"):
        get_task("caption")


def test_unknown_option_lists_the_task_options():
    with pytest.raises(ValueError, match=r"'tua'.*'grounding'.*tau \(default 0\.5\)"):
        get_task("grounding", tua=0.7)
    with pytest.raises(ValueError, match=r"'tau'.*'vqa'.*its options: answer_rule \(default 'official'\)"):
        get_task("vqa", tau=0.5)


@pytest.mark.parametrize("tau", [0, -0.1, 1.5, math.nan, "0.5", True, None])
def test_bad_tau_is_rejected(tau):
    with pytest.raises(ValueError, match="'tau'"):
        get_task("grounding", tau=tau)


def test_config_records_the_settings():
    assert get_task("grounding").config() == {"name": "grounding", "tau": 0.5, "clip": False}
    assert get_task("grounding", tau=1, clip=True).config() == {"name": "grounding", "tau": 1.0, "clip": True}
    assert get_task("vqa").config() == {"name": "vqa", "answer_rule": "official"}
    assert get_task("vqa", answer_rule="lenient").config() == {"name": "vqa", "answer_rule": "lenient"}
    json.dumps(get_task("grounding", tau=0.3).config())


def test_tasks_refuse_samples_of_another_task():
    adapter = FakeAdapter()
    with pytest.raises(ValueError, match=r"task 'grounding' cannot handle sample 'q1' of task 'vqa'"):
        GroundingTask().judge(adapter, q_sample(), "[8, 12, 40, 44]", {})
    with pytest.raises(ValueError, match="task 'vqa' cannot handle sample 'g1'"):
        VQATask().prompt(adapter, g_sample())


# --- prompts -------------------------------------------------------------------------------------------


def test_prompts_go_through_the_adapter():
    adapter = FakeAdapter()
    assert get_task("grounding").prompt(adapter, g_sample()) == "Where is the dog?"
    assert get_task("vqa").prompt(adapter, q_sample()) == "Q: What colour?"


# --- grounding judge -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, outcome, pred_box, iou", [
    ("[8, 12, 40, 44]", "correct", [8.0, 12.0, 40.0, 44.0], 1.0),
    ('{"bbox_2d": [24, 12, 56, 44]}', "mislocated", [24.0, 12.0, 56.0, 44.0], 1 / 3),  # half overlap
    ("[100, 100, 120, 120]", "mislocated", [100.0, 100.0, 120.0, 120.0], 0.0),
    ("I cannot find it.", "parse_failure", None, 0.0),
    ("[40, 12, 8, 44]", "parse_failure", None, 0.0),  # swapped corners: no valid box
])
def test_grounding_judge_outcomes(text, outcome, pred_box, iou):
    rec = get_task("grounding").judge(FakeAdapter(), g_sample(), text, {})
    assert set(rec) == GROUNDING_KEYS
    assert rec["outcome"] == outcome and rec["pred_box"] == pred_box and rec["iou"] == pytest.approx(iou)
    assert rec["id"] == "g1" and rec["task"] == "grounding" and rec["pred_text"] == text
    assert rec["image"] == str(Path("/data/img/g.png")) and rec["expression"] == "the dog"
    assert rec["gt_box"] == list(GT)
    json.dumps(rec)


def test_grounding_tau_decides_correct_vs_mislocated():
    text = '{"bbox_2d": [24, 12, 56, 44]}'  # IoU 1/3 with GT
    assert get_task("grounding").judge(FakeAdapter(), g_sample(), text, {})["outcome"] == "mislocated"
    assert get_task("grounding", tau=0.3).judge(FakeAdapter(), g_sample(), text, {})["outcome"] == "correct"


def test_grounding_boxes_are_scored_unclipped_unless_clip():
    """lmms-eval's RefCOCO IoU takes the predicted box as written: a box overflowing the 64x48 image keeps
    its whole area in the union. clip=True clips it to the image first (and is recorded in the config)."""
    text = "[8, 12, 72, 44]"  # 64 px wide, 24 of them off the image; GT is (8, 12, 40, 44)
    plain = get_task("grounding").judge(FakeAdapter(), g_sample(), text, {})
    assert plain["pred_box"] == [8.0, 12.0, 72.0, 44.0] and plain["iou"] == pytest.approx(0.5)
    clipped = get_task("grounding", clip=True).judge(FakeAdapter(), g_sample(), text, {})
    assert clipped["pred_box"] == [8.0, 12.0, 64.0, 44.0] and clipped["iou"] == pytest.approx(32 / 56)
    off = get_task("grounding", clip=True).judge(FakeAdapter(), g_sample(), "[70, 12, 90, 44]", {})
    assert off["outcome"] == "mislocated" and off["iou"] == 0.0  # wholly off the image: degenerate after clipping
    with pytest.raises(ValueError, match="'clip' must be True or False"):
        get_task("grounding", clip="yes")
    assert task_from_settings("grounding", {"tau": 0.5, "clip": True}).config()["clip"] is True


def test_grounding_judge_hands_meta_and_image_size_to_the_adapter():
    adapter = FakeAdapter()
    rec = get_task("grounding").judge(adapter, g_sample(), "[0, 12, 32, 44]", {"dx": 8.0})
    assert adapter.calls == [("[0, 12, 32, 44]", {"dx": 8.0}, (64, 48))]
    assert rec["pred_box"] == list(GT) and rec["outcome"] == "correct"
    get_task("grounding").judge(adapter, g_sample(), "x", None)  # no meta: the adapter gets {}
    assert adapter.calls[-1][1] == {}


def test_grounding_judge_reads_the_image_size_when_unknown(tmp_path):
    Image.new("RGB", (80, 60)).save(tmp_path / "a.png")
    s = Sample(id="g", image_path=tmp_path / "a.png", task="grounding", expression="x", box=GT)
    adapter = FakeAdapter()
    get_task("grounding").judge(adapter, s, "[8, 12, 40, 44]", {})
    assert adapter.calls[0][2] == (80, 60)


# --- VQA judge ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, answer, answer_type, outcome", [
    ("Red.", "red", "exact", "correct"),
    ("red, no: blue", "red", "exact", "wrong"),
    ("", "red", "exact", "parse_failure"),
    ("(B) a cat", "B", "choice", "correct"),
    ("Answer: C", "B", "choice", "wrong"),
    ("a cat", "B", "choice", "parse_failure"),
    ("three", "3", "number", "correct"),
    ("none", "3", "number", "parse_failure"),
])
def test_vqa_judge_uses_the_sample_answer_type(text, answer, answer_type, outcome):
    rec = get_task("vqa").judge(FakeAdapter(), q_sample(answer=answer, answer_type=answer_type), text, {})
    assert set(rec) == VQA_KEYS
    assert rec["outcome"] == outcome and rec["answer_type"] == answer_type
    assert (rec["id"], rec["task"], rec["question"], rec["answer"], rec["pred_text"]) == (
        "q1", "vqa", "What colour?", answer, text)


# --- summaries ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["grounding", "vqa"])
def test_summarize_empty(name):
    task = get_task(name)
    s = task.summarize([])
    assert s == {"n": 0, "accuracy": 0.0, "counts": dict.fromkeys(task.outcomes, 0),
                 "fractions": dict.fromkeys(task.outcomes, 0.0), "parse_failure_rate": 0.0, "mean_iou": None,
                 **({"mean_rel_error": None, "answer_rules": {}} if name == "vqa" else {})}
    json.dumps(s)


def test_summarize_grounding_records():
    task, adapter = get_task("grounding"), FakeAdapter()
    texts = ["[8, 12, 40, 44]", "[8, 12, 40, 44]", '{"bbox_2d": [24, 12, 56, 44]}', "no box"]
    recs = [task.judge(adapter, g_sample(f"g{i}"), t, {}) for i, t in enumerate(texts)]
    s = task.summarize(recs)
    assert s["n"] == 4 and s["accuracy"] == 0.5
    assert s["counts"] == {"correct": 2, "mislocated": 1, "parse_failure": 1}
    assert s["fractions"] == {"correct": 0.5, "mislocated": 0.25, "parse_failure": 0.25}
    assert s["parse_failure_rate"] == 0.25
    assert s["mean_iou"] == pytest.approx((1 + 1 + 1 / 3 + 0) / 4)  # unparsed answers count as IoU 0


def test_summarize_vqa_records():
    task = get_task("vqa")
    recs = [{"id": str(i), "outcome": o} for i, o in enumerate(["correct", "wrong", "wrong", "parse_failure"])]
    s = task.summarize(recs)
    assert s["accuracy"] == 0.25 and s["counts"] == {"correct": 1, "wrong": 2, "parse_failure": 1}
    assert s["parse_failure_rate"] == 0.25 and s["mean_iou"] is None


def test_summarize_rejects_another_tasks_outcomes():
    with pytest.raises(ValueError, match=r"record 'g3' has outcome 'mislocated'.*task 'vqa'"):
        get_task("vqa").summarize([{"id": "q1", "outcome": "correct"}, {"id": "g3", "outcome": "mislocated"}])


# --- custom tasks -------------------------------------------------------------------------------------------------


def test_custom_task_registers_and_runs(registry):
    @register_task
    @dataclass(frozen=True)
    class EchoTask(Task):
        """Correct when the model repeats the question (optionally ignoring case)."""

        name: ClassVar[str] = "echo"
        outcomes: ClassVar[tuple[str, ...]] = ("match", "miss")
        ignore_case: bool = False

        def prompt(self, adapter, sample):
            return adapter.vqa_prompt(f"Repeat: {sample.question}")

        def judge(self, adapter, sample, text, meta):
            rec = self.record(sample, text)
            a, b = (text, sample.question) if not self.ignore_case else (text.lower(), sample.question.lower())
            rec["outcome"] = "match" if a == b else "miss"
            return rec

    assert "echo" in task_names()
    task = get_task("echo", ignore_case=True)
    assert task.config() == {"name": "echo", "ignore_case": True}
    s = Sample(id="e1", image_path=Path("x.png"), task="echo", question="Hi")
    assert task.prompt(FakeAdapter(), s) == "Q: Repeat: Hi"
    recs = [task.judge(None, s, "HI", {}), get_task("echo").judge(None, s, "HI", {})]
    assert [r["outcome"] for r in recs] == ["match", "miss"]
    summary = task.summarize(recs)
    assert summary["accuracy"] == 0.5 and summary["parse_failure_rate"] == 0.0 and summary["mean_iou"] is None
    with pytest.raises(ValueError, match=r"ignore_case \(default False\)"):
        get_task("echo", case=True)


def test_register_task_validates_the_class(registry):
    class NoName(Task):
        outcomes = ("ok",)

    class NoOutcomes(Task):
        name = "t1"

    class DupOutcomes(Task):
        name, outcomes = "t2", ("ok", "ok")

    class RequiredOption(Task):
        name, outcomes = "t3", ("ok",)

        def __init__(self, level):
            self.level = level

    class Grounding2(Task):
        name, outcomes = "grounding", ("ok",)

    with pytest.raises(TypeError, match="Task subclass"):
        register_task(object)
    with pytest.raises(ValueError, match="name"):
        register_task(NoName)
    with pytest.raises(ValueError, match="outcomes"):
        register_task(NoOutcomes)
    with pytest.raises(ValueError, match="distinct"):
        register_task(DupOutcomes)
    with pytest.raises(ValueError, match="option 'level' must be a keyword parameter with a default"):
        register_task(RequiredOption)
    with pytest.raises(ValueError, match="'grounding' registered twice"):
        register_task(Grounding2)
    assert register_task(GroundingTask) is GroundingTask  # re-registering the same class is harmless
    assert get_task("grounding").__class__ is GroundingTask
