"""CV-Bench, MMStar, CountBenchQA and Spatial457 in their hub parquet schemas, incl. malformed rows; the
converted answers are judged by the VQA task's rules."""

import io
import json

import pytest
from PIL import Image

from vrh.data import load_dataset
from vrh.data.sources import convert
from vrh.data.sources.choices import CHOICE_SUFFIX, inline_letters
from vrh.tasks.vqa import judge_answer


def png(w=40, h=30):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (20, 120, 200)).save(buf, format="PNG")
    return buf.getvalue()


def img(data=None):
    return {"bytes": png() if data is None else data, "path": "x.png"}


def skipped(out):
    return {r["id"]: r["reason"] for r in map(json.loads, (out / "skipped.jsonl").read_text().splitlines())}


def test_cvbench(tmp_path, write_parquet):
    prompt = ("Which object is closer to the camera?\nSelect from the following choices.\n(A) lamp\n(B) chair")
    base = {"idx": 0, "type": "3D", "task": "Depth", "image": img(), "question": "Which object is closer?",
            "choices": ["lamp", "chair"], "answer": "(B)", "prompt": prompt, "filename": "img/3D/depth/omni3d_1.png",
            "source": "Omni3D", "source_dataset": "SUN-RGBD", "source_filename": "1.jpg", "target_class": None,
            "target_size": None, "bbox": None}
    rows = [base, {**base, "idx": 1, "answer": "(C)"},  # letter beyond the two choices
            {**base, "idx": 2, "answer": "chair"}, {**base, "idx": 3, "image": img(b"not an image")},
            {**base, "idx": 4}, {**base, "idx": 5}]  # as many good rows as bad: the conversion passes
    write_parquet(tmp_path / "cv" / "test-00000-of-00001.parquet", rows)
    rep = convert("cvbench", tmp_path / "cv", tmp_path / "out", progress=False)
    s = load_dataset(tmp_path / "out" / "data.jsonl")[0]
    assert rep.n_samples == 3 and s.id == "cvbench-test-0" and s.answer == "B" and s.answer_type == "choice"
    assert s.question == prompt + "\n" + CHOICE_SUFFIX  # the prompt snapshot: what the model is asked
    assert s.meta["image_source"] == "Omni3D" and s.meta["choices"] == ["lamp", "chair"]
    assert judge_answer("(B) chair", s.answer, s.answer_type) == "correct"
    reasons = skipped(tmp_path / "out")
    assert reasons["cvbench-test-1"] == "unknown answer letter 'C': the options are A, B"
    assert "not an option letter" in reasons["cvbench-test-2"]
    assert "unreadable image" in reasons["cvbench-test-3"]


def test_mmstar(tmp_path, write_parquet):
    q = "Which option describes the object relationship correctly?\nOptions: A: on, B: under, C: beside, D: in"
    base = {"index": 7, "question": q, "image": img(), "answer": "C", "category": "fine-grained perception",
            "l2_category": "object relation", "meta_info": {"source": "x", "split": "val"}}
    rows = [base, {**base, "index": 8, "answer": "E"}, {**base, "index": 9, "question": "No options here?"},
            {**base, "index": 10, "question": ""}, {**base, "index": 11}, {**base, "index": 12}]
    write_parquet(tmp_path / "val-00000-of-00001.parquet", rows)
    rep = convert("mmstar", tmp_path / "val-00000-of-00001.parquet", tmp_path / "out", progress=False)
    s = load_dataset(tmp_path / "out" / "data.jsonl")[0]
    assert rep.n_samples == 3 and s.answer == "C"
    assert s.question == (  # prompt snapshot: a change here changes what every model is asked
        "Which option describes the object relationship correctly?\nOptions: A: on, B: under, C: beside, D: in\n"
        "Answer with the option's letter from the given choices directly.")
    assert s.meta["l2_category"] == "object relation"
    reasons = skipped(tmp_path / "out")
    assert reasons["mmstar-val-8"] == "unknown answer letter 'E': the options are A, B, C, D"
    assert "no inline options" in reasons["mmstar-val-9"] and "empty question" in reasons["mmstar-val-10"]


def test_countbenchqa(tmp_path, write_parquet):
    rows = [{"image": img(), "text": "three dogs", "question": "How many dogs are in the image?", "number": 3},
            {"image": img(), "text": "x", "question": "How many cats?", "number": None},
            {"image": {"bytes": None, "path": "gone.jpg"}, "text": "x", "question": "How many?", "number": 2},
            {"image": img(), "text": "two cats", "question": "How many cats are in the image?", "number": 2}]
    write_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    rep = convert("countbenchqa", tmp_path, tmp_path / "out", progress=False)
    s = load_dataset(tmp_path / "out" / "data.jsonl")[0]
    assert rep.n_samples == 2 and s.id == "countbenchqa-test-0" and (s.answer, s.answer_type) == ("3", "number")
    assert s.question == "How many dogs are in the image?\nAnswer with a single number."
    assert s.answer_rule == "countbenchqa"  # lmms-eval's exact match by default
    assert judge_answer("I see three.", s.answer, s.answer_type) == "correct"
    reasons = skipped(tmp_path / "out")
    assert "whole count" in reasons["countbenchqa-test-1"] and reasons["countbenchqa-test-2"] == "missing image bytes"
    # lmms-eval's other task on the same rows: its pre-prompt, and number words read (issue 37 item 15)
    rep = convert("countbench", tmp_path, tmp_path / "words", progress=False)
    w = load_dataset(tmp_path / "words" / "data.jsonl")[0]
    assert rep.n_samples == 2 and w.id == "countbench-test-0" and (w.answer, w.answer_rule) == ("3", "countbench")
    assert w.question == ("Look at the image carefully and count the objects. Answer with just a number, without "
                          "any additional text. How many dogs are in the image?")


def test_spatial457(tmp_path, write_parquet):
    rows = [{"image": img(), "question": "What color is the bus?", "answer": "Red", "question_index": 4},
            {"image": img(), "question": "What shape?", "answer": "?", "question_index": 5}]
    write_parquet(tmp_path / "L1_single" / "validation-00000-of-00001.parquet", rows)
    rep = convert("spatial457", tmp_path, tmp_path / "out", progress=False)  # found one config folder down
    [s] = load_dataset(tmp_path / "out" / "data.jsonl")
    assert rep.n_samples == 1 and s.id == "spatial457-validation-4" and s.answer_type == "exact"
    assert judge_answer("red.", s.answer, s.answer_type) == "correct"
    assert "letter or digit" in skipped(tmp_path / "out")["spatial457-validation-5"]


def test_two_configs_with_the_split_are_an_error_naming_them(tmp_path, write_parquet):
    row = {"image": img(), "question": "q?", "answer": "a"}
    for config in ("L1_single", "L2_objects"):
        write_parquet(tmp_path / config / "validation-00000-of-00001.parquet", [row])
    with pytest.raises(ValueError, match="several folders.*L1_single, L2_objects"):
        convert("spatial457", tmp_path, tmp_path / "out")


@pytest.mark.parametrize("question, letters", [
    ("Q?\nOptions: A: a cat, B: a dog", "AB"),
    ("Q?\n(A) left\n(B) right\n(C) up", "ABC"),
    ("Q? A. one B. two", "AB"),
    ("Is it a cat?", ""),
])
def test_inline_letters(question, letters):
    assert inline_letters(question) == letters


# --- the hub's real file layouts (issue 29, items 1-2) ---------------------------------------------------

def cvbench_row(idx, kind, **kw):
    choices = ["lamp", "chair"]
    prompt = "Which object is closer?\nSelect from the following choices.\n(A) lamp\n(B) chair"
    return {"idx": idx, "type": kind, "task": "Depth" if kind == "3D" else "Count", "image": img(),
            "question": "Which object is closer?", "choices": choices, "answer": "(A)", "prompt": prompt,
            "source": "Omni3D" if kind == "3D" else "COCO", **kw}


def listed_splits(err):
    """The splits an error message offers ("splits found: a, b (choose one with --split)")."""
    import re

    m = re.search(r"splits found: (.*?) \(choose one with --split\)", str(err))
    assert m, str(err)
    return [s.strip() for s in m.group(1).split(",")]


def test_cvbench_reads_the_2d_and_3d_files_by_default(tmp_path, write_parquet):
    write_parquet(tmp_path / "cv" / "test_2d.parquet", [cvbench_row(i, "2D") for i in range(3)])
    write_parquet(tmp_path / "cv" / "test_3d.parquet", [cvbench_row(i, "3D") for i in range(3, 5)])
    rep = convert("cvbench", tmp_path / "cv", tmp_path / "out", progress=False)
    assert (rep.split, rep.rows_read, rep.n_samples, rep.expected_rows) == ("test", 5, 5, 2638)
    assert [s.meta["type"] for s in load_dataset(tmp_path / "out" / "data.jsonl")] == ["2D"] * 3 + ["3D"] * 2
    with pytest.raises(ValueError) as err:
        convert("cvbench", tmp_path / "cv", tmp_path / "x", split="val")
    assert set(listed_splits(err.value)) == {"test", "test_2d", "test_3d"}
    for split, n in (("test_2d", 3), ("test_3d", 2), ("test", 5)):  # every split the error lists converts
        rep = convert("cvbench", tmp_path / "cv", tmp_path / split, split=split, progress=False)
        assert rep.n_samples == n, split


def test_cvbench_2024_layout_reads_test_parquet_and_its_error_is_consistent(tmp_path, write_parquet):
    write_parquet(tmp_path / "cv" / "test.parquet", [cvbench_row(i, "2D" if i < 2 else "3D") for i in range(4)])
    rep = convert("cvbench", tmp_path / "cv", tmp_path / "out", progress=False)
    assert rep.n_samples == 4 and rep.split == "test"
    with pytest.raises(ValueError) as err:
        convert("cvbench", tmp_path / "cv", tmp_path / "x", split="test_2d")
    assert listed_splits(err.value) == ["test"]  # never "no files for split 'test' ... splits found: test"


def test_mmstar_reads_mmstar_parquet_at_the_snapshot_top(tmp_path, write_parquet):
    q = "Which option is right?\nOptions: A: on, B: under, C: beside, D: in"
    rows = [{"index": i, "question": q, "image": img(), "answer": "ABCD"[i % 4], "category": "c", "l2_category": "l2",
             "meta_info": {"source": "MMBench", "split": "val", "image_path": f"images/{i}.jpg"}} for i in range(3)]
    write_parquet(tmp_path / "MMStar" / "mmstar.parquet", rows)
    (tmp_path / "MMStar" / "MMStar.tsv").write_text("index\tquestion\n")
    rep = convert("mmstar", tmp_path / "MMStar", tmp_path / "out", progress=False)
    assert (rep.split, rep.n_samples, rep.expected_rows) == ("val", 3, 1500)
    assert [s.id for s in load_dataset(tmp_path / "out" / "data.jsonl")] == ["mmstar-val-0", "mmstar-val-1",
                                                                             "mmstar-val-2"]
    with pytest.raises(ValueError) as err:
        convert("mmstar", tmp_path / "MMStar", tmp_path / "x", split="test")
    for split in listed_splits(err.value):
        rep = convert("mmstar", tmp_path / "MMStar", tmp_path / f"o-{split}", split=split, progress=False)
        assert rep.n_samples == 3, split
