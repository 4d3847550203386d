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
            {**base, "idx": 2, "answer": "chair"}, {**base, "idx": 3, "image": img(b"not an image")}]
    write_parquet(tmp_path / "cv" / "test-00000-of-00001.parquet", rows)
    rep = convert("cvbench", tmp_path / "cv", tmp_path / "out", progress=False)
    [s] = load_dataset(tmp_path / "out" / "data.jsonl")
    assert rep.n_samples == 1 and s.id == "cvbench-test-0" and s.answer == "B" and s.answer_type == "choice"
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
            {**base, "index": 10, "question": ""}]
    write_parquet(tmp_path / "val-00000-of-00001.parquet", rows)
    rep = convert("mmstar", tmp_path / "val-00000-of-00001.parquet", tmp_path / "out", progress=False)
    [s] = load_dataset(tmp_path / "out" / "data.jsonl")
    assert rep.n_samples == 1 and s.answer == "C"
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
            {"image": {"bytes": None, "path": "gone.jpg"}, "text": "x", "question": "How many?", "number": 2}]
    write_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    rep = convert("countbenchqa", tmp_path, tmp_path / "out", progress=False)
    [s] = load_dataset(tmp_path / "out" / "data.jsonl")
    assert rep.n_samples == 1 and s.id == "countbenchqa-test-0" and (s.answer, s.answer_type) == ("3", "number")
    assert s.question == "How many dogs are in the image?"
    assert judge_answer("I see three.", s.answer, s.answer_type) == "correct"
    reasons = skipped(tmp_path / "out")
    assert "whole count" in reasons["countbenchqa-test-1"] and reasons["countbenchqa-test-2"] == "missing image bytes"


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
