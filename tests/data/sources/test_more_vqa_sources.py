"""MathVista (parquet), VAW (JSON + Visual Genome folder) and SpatialRGPT-Bench (its JSON list or a JSONL copy
+ image folder) in their real schemas, malformed rows included; the converted answers are judged by the VQA
rules."""

import io
import json

import pytest
from PIL import Image

from vrh.data import load_dataset
from vrh.data.sources import SkipRow, convert
from vrh.data.sources.choices import CHOICE_SUFFIX
from vrh.data.sources.vaw import make_question
from vrh.tasks import get_task
from vrh.tasks.vqa import judge_answer


def png(w=40, h=30, colour=(20, 120, 200)):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), colour).save(buf, format="PNG")
    return buf.getvalue()


def skipped(out):
    return {r["id"]: r["reason"] for r in map(json.loads, (out / "skipped.jsonl").read_text().splitlines())}


# --- MathVista -------------------------------------------------------------------------------------------

def mathvista_row(pid, **kw):
    row = {"pid": str(pid), "question": "What is the measure of angle B?", "image": f"images/{pid}.jpg",
           "decoded_image": {"bytes": png(), "path": None}, "choices": ["30°", "45°", "60°", "90°"],
           "unit": None, "precision": None, "answer": "60°", "question_type": "multi_choice", "answer_type": "text",
           "metadata": {"category": "math-targeted-vqa", "task": "geometry problem solving", "skills": ["algebraic"]},
           "query": "Hint: Please answer ... at the end.\nQuestion: What is the measure of angle B?"}
    return {**row, **kw}


def free_form(pid, answer_type, answer, **kw):
    return mathvista_row(pid, question="How long is the bar?", question_type="free_form", choices=None,
                         answer_type=answer_type, answer=answer, **kw)


def test_mathvista_converts_every_question(tmp_path, write_parquet):
    rows = [mathvista_row(1), free_form(2, "integer", "12"), free_form(9, "float", "1.45", precision=2.0, unit="cm"),
            free_form(10, "list", "[2014, 2016]"),
            mathvista_row(3, answer="75°"),  # gold not among the options
            mathvista_row(4, choices=[]), mathvista_row(5, decoded_image={"bytes": b"nope", "path": None}),
            free_form(11, "integer", "1.5"), free_form(12, "float", "2.5"),  # no precision
            *(mathvista_row(pid) for pid in (6, 7, 8))]  # more good rows than bad: the conversion passes
    write_parquet(tmp_path / "mv" / "data" / "testmini-00000-of-00001.parquet", rows)
    rep = convert("mathvista", tmp_path / "mv", tmp_path / "out", progress=False)
    by_id = {s.id.removeprefix("mathvista-testmini-"): s for s in load_dataset(tmp_path / "out" / "data.jsonl")}
    assert rep.split == "testmini" and rep.expected_rows == 1000 and sorted(by_id) == ["1", "10", "2", "6", "7", "8", "9"]
    s = by_id["1"]
    assert s.question == ("What is the measure of angle B?\nChoices:\n(A) 30°\n(B) 45°\n(C) 60°\n(D) 90°\n"
                          + CHOICE_SUFFIX)
    assert (s.answer, s.answer_type, s.answer_rule, s.meta["answer_text"]) == ("C", "choice", "mathvista", "60°")
    assert s.meta["category"] == "geometry problem solving"
    assert [(by_id[k].answer, by_id[k].answer_type, by_id[k].precision) for k in ("2", "9", "10")] == [
        ("12", "integer", None), ("1.45", "float", 2), ("[2014, 2016]", "exact", None)]
    assert by_id["9"].question == ("How long is the bar? (Unit: cm)\nPlease answer the question requiring a "
                                   "floating-point number with two decimal places and provide the final value, "
                                   "e.g., 1.23, 1.34, 1.45, at the end.")
    reasons = skipped(tmp_path / "out")
    assert "is not one of the choices" in reasons["mathvista-testmini-3"]
    assert "1-26 choices" in reasons["mathvista-testmini-4"]
    assert "unreadable image" in reasons["mathvista-testmini-5"]
    assert "does not fit answer_type 'integer'" in reasons["mathvista-testmini-11"]
    assert "needs its precision" in reasons["mathvista-testmini-12"]


@pytest.mark.parametrize("pid, answer, official, lenient", [
    # MathVista's calculate_score on vrh's extraction: an option's text is matched, the last number read
    ("1", "The answer is (C).", "correct", "correct"),
    ("1", "60°", "correct", "parse_failure"),  # the option's text alone: vrh's letter rule reads nothing
    ("1", "60", "correct", "parse_failure"),  # nearest option by edit distance
    ("1", "C", "correct", "correct"),
    ("2", "There are 12.", "correct", "correct"),
    ("2", "5 + 7 = 12", "correct", "wrong"),  # the last number vs the first
    ("9", "1.449", "correct", "correct"),  # rounded to the precision, 2
    ("9", "1.4", "wrong", "wrong"),
    ("10", "[2014, 2016]", "correct", "correct"),
    ("10", "2014, 2016", "wrong", "correct"),  # MathVista compares a list as written; vrh normalises
])
def test_mathvista_answers_scored_both_ways(tmp_path, write_parquet, pid, answer, official, lenient):
    rows = [mathvista_row(1), free_form(2, "integer", "12"), free_form(9, "float", "1.45", precision=2),
            free_form(10, "list", "[2014, 2016]")]
    write_parquet(tmp_path / "mv" / "data" / "testmini-00000-of-00001.parquet", rows)
    convert("mathvista", tmp_path / "mv", tmp_path / "out", progress=False)
    s = {x.id: x for x in load_dataset(tmp_path / "out" / "data.jsonl")}[f"mathvista-testmini-{pid}"]
    assert get_task("vqa").judge(None, s, answer, {})["outcome"] == official
    assert get_task("vqa", answer_rule="lenient").judge(None, s, answer, {})["outcome"] == lenient


def test_mathvista_multiple_choice_subset(tmp_path, write_parquet):
    rows = [mathvista_row(1), free_form(2, "integer", "12"),
            mathvista_row(781, choices=["9", "12", "18", "18"], answer="18")]  # the gold written twice
    write_parquet(tmp_path / "mv" / "data" / "testmini-00000-of-00001.parquet", rows)
    rep = convert("mathvista", tmp_path / "mv", tmp_path / "out", progress=False, subset="multi_choice")
    one, dup = load_dataset(tmp_path / "out" / "data.jsonl")
    assert (rep.n_samples, rep.skipped) == (2, []) and rep.options == {"subset": "multi_choice"}
    assert rep.excluded == {"free-form question (not in the multi_choice subset)": 1}
    assert dup.answer == "C"  # the first letter of the text; both rules accept either
    for rule in ("official", "lenient"):
        task = get_task("vqa", answer_rule=rule)
        assert [task.judge(None, dup, a, {})["outcome"] for a in ("C", "D", "(D) 18", "B")] == [
            "correct", "correct", "correct", "wrong"], rule
    with pytest.raises(ValueError, match="--subset must be one of"):
        convert("mathvista", tmp_path / "mv", tmp_path / "x", subset="mcq")


# --- VAW ------------------------------------------------------------------------------------------------

TYPES = {"color": ["red", "blue", "green", "white", "black"], "material": ["wooden", "metal", "plastic"]}


def vaw_entry(iid, **kw):
    e = {"image_id": "2373241", "instance_id": str(iid), "instance_bbox": [4.0, 5.0, 20.0, 12.0],
         "instance_polygon": None, "object_name": "mug", "positive_attributes": ["red", "wooden"],
         "negative_attributes": ["blue", "green", "white", "black", "metal"]}
    return {**e, **kw}


@pytest.fixture
def vaw(tmp_path):
    (tmp_path / "images" / "VG_100K").mkdir(parents=True)
    Image.new("RGB", (48, 32), "gray").save(tmp_path / "images" / "VG_100K" / "2373241.jpg")
    (tmp_path / "attribute_types.json").write_text(json.dumps(TYPES))
    entries = [vaw_entry(1), vaw_entry(2, negative_attributes=["metal"]),  # too few negatives of any type
               vaw_entry(3, instance_bbox=[40, 5, 20, 12]),  # box outside the 48x32 image
               vaw_entry(4, object_name=""), "not an object", vaw_entry(5), vaw_entry(6), vaw_entry(7)]
    (tmp_path / "val.json").write_text(json.dumps(entries))
    return tmp_path


def test_vaw_generator_is_seeded_and_draws_distractors_from_negative_labels(vaw, tmp_path):
    rep = convert("vaw", vaw, tmp_path / "out", progress=False)
    s = load_dataset(tmp_path / "out" / "data.jsonl")[0]
    assert rep.n_samples == 4 and s.id == "vaw-val-1" and s.answer_type == "choice"
    # only "red" has 3 same-type negatives; the other options were all marked absent by annotators
    assert s.meta["attribute"] == "red" and s.meta["category"] == "color"
    assert set(s.meta["choices"]) - {"red"} <= {"blue", "green", "white", "black"} and len(s.meta["choices"]) == 4
    assert s.question.startswith("What is the color of the mug in the red box?\nChoices:\n(A) ")
    assert s.meta["choices"][ord(s.answer) - ord("A")] == "red"
    drawn = Image.open(s.image_path).convert("RGB")
    assert drawn.getpixel((4, 10)) == (255, 0, 0) and drawn.getpixel((40, 30)) != (255, 0, 0)  # the box, in red
    reasons = skipped(tmp_path / "out")
    assert "no positive attribute has enough negative attributes of one of its types" in reasons["vaw-val-2"]
    assert "outside the 48x32 image" in reasons["vaw-val-3"]
    assert "empty object_name" in reasons["vaw-val-4"]
    assert reasons["vaw-val-row4"] == "entry is not a JSON object: 'not an object'" and rep.rows_read == 8
    # same seed -> same question; another seed may reorder the options but never changes what is true
    again = convert("vaw", vaw, tmp_path / "again", progress=False)
    assert again.n_samples == 4
    assert load_dataset(tmp_path / "again" / "data.jsonl")[0].question == s.question
    orders = {tuple(make_question({**vaw_entry(1), "_types": {a: (t,) for t, v in TYPES.items() for a in v}}, seed)[1])
              for seed in range(8)}
    assert len(orders) > 1


def test_vaw_missing_images_are_one_error(vaw, tmp_path):
    entries = json.loads((vaw / "val.json").read_text()) + [vaw_entry(9, image_id="404")]
    (vaw / "val.json").write_text(json.dumps(entries))
    with pytest.raises(FileNotFoundError, match=r"1 image file\(s\) .* 404.jpg"):
        convert("vaw", vaw, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- SpatialRGPT-Bench ---------------------------------------------------------------------------------

def rgpt_line(i, category, text_q, gold, qtype="qualitative", bbox=((2, 2, 12, 10), (20, 4, 36, 20)), **kw):
    return {"id": f"r{i}", "image_info": {"file_path": "scenes/a.png", "height": 30, "width": 40},
            "text_q": text_q, "conversations": [{"from": "human", "value": "<image>\n" + text_q},
                                                {"from": "gpt", "value": gold}],
            "bbox": [list(b) for b in bbox], "rle": [], "qa_info": {"type": qtype, "category": category}, **kw}


@pytest.fixture
def rgpt(tmp_path):
    (tmp_path / "scenes").mkdir()
    Image.new("RGB", (40, 30), "white").save(tmp_path / "scenes" / "a.png")
    lines = [rgpt_line(0, "behind_predicate", "Is Region [0] behind Region [1]?", "Indeed, Region [0] is behind."),
             rgpt_line(1, "left_choice", "Which is more to the left, Region [0] or Region [1]?",
                       "Region [1] is more to the left."),
             rgpt_line(2, "direct_distance", "How far is Region [0] from Region [1]?", "2.5 meters",
                       qtype="quantitative"),
             rgpt_line(3, "tall_predicate", "Is Region [0] taller than Region [1]?", "Perhaps."),
             rgpt_line(4, "wide_predicate", "Is Region [2] wider than Region [0]?", "No."),  # only 2 boxes
             rgpt_line(5, "big_predicate", "Is Region [0] bigger than Region [1]?", "Yes.",
                       bbox=((2, 2, 12, 10), (30, 4, 60, 20))),  # box outside the image
             rgpt_line(6, "tall_choice", "Who is taller, Region [0] or Region [1]?", "With more height is Region [0]."),
             rgpt_line(7, "above_predicate", "Is Region [0] above Region [1]?", "That is False.")]
    (tmp_path / "val_SpatialRGPT-Bench.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "{oops\n")
    return tmp_path


def test_spatialrgpt_draws_regions_and_keeps_rule_judgeable_questions(rgpt, tmp_path):
    rep = convert("spatialrgpt", rgpt, tmp_path / "out", progress=False, subset="qualitative")
    pred, choice, tall, above = load_dataset(tmp_path / "out" / "data.jsonl")
    assert rep.n_samples == 4 and rep.expected_rows == 1406
    assert (tall.answer, above.answer) == ("A", "no")
    assert pred.question == ("Region [0] is outlined in red and Region [1] in blue. Is Region [0] behind Region [1]?"
                             "\nAnswer with yes or no.")
    assert (pred.answer, pred.answer_type) == ("yes", "exact")
    assert judge_answer("Yes.", pred.answer, pred.answer_type) == "correct"
    assert choice.question.endswith("(A) Region [0]\n(B) Region [1]\n" + CHOICE_SUFFIX)
    assert (choice.answer, choice.answer_type) == ("B", "choice")
    im = Image.open(pred.image_path).convert("RGB")
    assert im.getpixel((2, 6)) == (255, 0, 0) and im.getpixel((20, 12)) == (0, 0, 255)  # region k in colour k
    reasons = skipped(tmp_path / "out")
    assert "spatialrgpt-val-r2" not in reasons  # quantitative: outside the qualitative subset, not a skip
    assert rep.excluded == {"quantitative question (not in the qualitative subset)": 1}
    assert "cannot read yes/no" in reasons["spatialrgpt-val-r3"]
    assert "names Region [2] but bbox has 2 box(es)" in reasons["spatialrgpt-val-r4"]
    assert "outside the 40x30 image" in reasons["spatialrgpt-val-r5"]
    assert "invalid JSON" in reasons["spatialrgpt-val-8"]


def test_spatialrgpt_describe_leaves_the_image_and_writes_the_boxes(rgpt, tmp_path):
    convert("spatialrgpt", rgpt, tmp_path / "out", progress=False, regions="describe", subset="qualitative")
    pred = load_dataset(tmp_path / "out" / "data.jsonl")[0]
    assert pred.question.startswith("Region [0] is the box from (0.05, 0.07) to (0.30, 0.33); Region [1] is the box "
                                    "from (0.50, 0.13) to (0.90, 0.67) (fractions of the image width and height).")
    assert Image.open(pred.image_path).convert("RGB").getpixel((2, 6)) == (255, 255, 255)
    with pytest.raises(ValueError, match="--regions must be one of"):
        convert("spatialrgpt", rgpt, tmp_path / "x", regions="paint")
    (rgpt / "scenes" / "a.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"1 image file\(s\) .* scenes/a.png"):
        convert("spatialrgpt", rgpt, tmp_path / "y")


def test_spatialrgpt_converts_the_size_questions_by_default(tmp_path):
    """Issue 29 item 5: width_data + height_data, gold in meters, scored as SpatialRGPT scores sizes."""
    (tmp_path / "scenes").mkdir()
    Image.new("RGB", (40, 30), "white").save(tmp_path / "scenes" / "a.png")
    one = ((2, 2, 12, 10),)
    lines = [rgpt_line(0, "width_data", "How wide is Region [0]?", "Region [0] is 30 centimeters wide.",
                       qtype="quantitative", bbox=one),
             rgpt_line(1, "height_data", "How tall is Region [0]?", "It is 2.1 feet.", qtype="quantitative", bbox=one),
             rgpt_line(2, "height_data", "How tall is Region [0]?", "About 30.", qtype="quantitative", bbox=one),
             rgpt_line(3, "distance_data", "How far is Region [0] from Region [1]?", "2.5 meters", qtype="quantitative"),
             rgpt_line(4, "behind_predicate", "Is Region [0] behind Region [1]?", "Indeed, it is.")]
    (tmp_path / "val_SpatialRGPT-Bench.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rep = convert("spatialrgpt", tmp_path, tmp_path / "out", progress=False)
    wide, tall = load_dataset(tmp_path / "out" / "data.jsonl")
    assert [(s.answer, s.answer_type) for s in (wide, tall)] == [("0.3", "length"), ("0.64008", "length")]
    assert wide.question == ("Region [0] is outlined in red. How wide is Region [0]?\n"
                             "Answer with a number and its unit of length.")
    assert "cannot read a positive length" in skipped(tmp_path / "out")["spatialrgpt-val-r2"]
    assert rep.excluded == {"distance or direction question (not in the size subset)": 1,
                            "qualitative question (not in the size subset)": 1}
    rec = get_task("vqa").judge(None, wide, "Region [0] is about 1 foot wide.", {})  # 0.3048 m
    assert rec["outcome"] == "correct" and rec["rel_error"] == pytest.approx(0.0048 / 0.3001)
    assert get_task("vqa").judge(None, tall, "It is 40 cm tall.", {})["outcome"] == "wrong"  # under 0.75 x 0.64
    with pytest.raises(ValueError, match="--subset must be one of"):
        convert("spatialrgpt", tmp_path, tmp_path / "x", subset="quantitative")


# --- SpatialRGPT-Bench's official annotation file, and every qualitative gold read (issue 29, items 3, 6) -

@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "indented"])
def test_spatialrgpt_reads_the_official_json_list(tmp_path, indent):
    (tmp_path / "scenes").mkdir()
    Image.new("RGB", (40, 30), "white").save(tmp_path / "scenes" / "a.png")
    records = [rgpt_line(0, "behind_predicate", "Is Region [0] behind Region [1]?", "Indeed, Region [0] is behind."),
               rgpt_line(1, "left_choice", "Which is more to the left, Region [0] or Region [1]?",
                         "Region [1] is more to the left."),
               rgpt_line(2, "tall_predicate", "Is Region [0] taller than Region [1]?", "No.")]
    (tmp_path / "SpatialRGPT-Bench_v1.json").write_text(json.dumps(records, indent=indent))
    rep = convert("spatialrgpt", tmp_path, tmp_path / "out", progress=False, subset="qualitative")
    assert (rep.rows_read, rep.n_samples, rep.skipped) == (3, 3, [])
    assert [(s.id, s.answer) for s in load_dataset(tmp_path / "out" / "data.jsonl")] == [
        ("spatialrgpt-val-r0", "yes"), ("spatialrgpt-val-r1", "B"), ("spatialrgpt-val-r2", "no")]
    rep = convert("spatialrgpt", tmp_path / "SpatialRGPT-Bench_v1.json", tmp_path / "file", progress=False,
                  subset="qualitative")
    assert rep.n_samples == 3  # the file itself, as --src, reads the same
    broken = json.dumps(records, indent=indent)[:-40]  # a truncated download: one error, nothing written
    (tmp_path / "SpatialRGPT-Bench_v1.json").write_text(broken)
    with pytest.raises(ValueError, match=r"SpatialRGPT-Bench_v1.json is not valid JSON"):
        convert("spatialrgpt", tmp_path, tmp_path / "broken")
    assert not (tmp_path / "broken").exists()


@pytest.mark.parametrize("gold, answer", [
    ("In fact, Region [0] may be shorter than Region [1].", "no"),  # the templates' contradicting openings
    ("Actually, Region [0] might be larger than Region [1].", "no"),
    ("That is True.", "yes"), ("That is False.", "no"), ("that is true", "yes"),
    ("Indeed, Region [0] is positioned on the right side of Region [1].", "yes"),
    ("Correct, Region [0] is not as tall as Region [1].", "yes"), ("Incorrect, Region [0] is not smaller.", "no"),
])
def test_spatialrgpt_gold_openings(gold, answer):
    from vrh.data.sources.spatialrgpt import gold_yes_no

    assert gold_yes_no(gold) == answer


# --- VAW attributes of several types (issue 29, item 8) --------------------------------------------------

HEIGHT_LENGTH = {"height": ["short", "tall", "medium", "towering"], "length": ["short", "long", "cropped", "extended"],
                 "color": ["red", "blue"]}


def test_vaw_keeps_every_type_of_an_attribute(tmp_path):
    from vrh.data.sources.vaw import attribute_types

    (tmp_path / "attribute_types.json").write_text(json.dumps(HEIGHT_LENGTH))
    types = attribute_types(tmp_path)
    assert types["short"] == ("height", "length") and types["red"] == ("color",)
    # "short" is a height and a length: with 3 height negatives it is asked as a height, distractors heights only
    row = {"instance_id": "1", "object_name": "man", "positive_attributes": ["short"],
           "negative_attributes": ["tall", "medium", "towering", "long", "cropped"], "_types": types}
    text, options, gold, kind = make_question(row, seed=0)
    assert (options[gold], kind, text) == ("short", "height", "What is the height of the man in the red box?")
    assert sorted(options) == ["medium", "short", "tall", "towering"]
    # with 3 negatives of each type, either type is asked (by seed), and its distractors are of that type only
    row["negative_attributes"] = ["tall", "medium", "towering", "long", "cropped", "extended"]
    asked = {}
    for seed in range(16):
        _, options, gold, kind = make_question(row, seed)
        assert options[gold] == "short" and set(options) - {"short"} <= set(HEIGHT_LENGTH[kind])
        asked[kind] = asked.get(kind, 0) + 1
    assert set(asked) == {"height", "length"}
    with pytest.raises(SkipRow, match="no positive attribute to ask about"):
        make_question({**row, "positive_attributes": []}, seed=0)
    with pytest.raises(SkipRow, match="no negative attribute to draw distractors from"):
        make_question({**row, "negative_attributes": ["short"]}, seed=0)  # marked both: positive wins


def test_vaw_distractors_never_include_another_true_attribute(tmp_path):
    # "small" is positive (true of the object) and a size; asking the size with "big" true too would offer two
    # true options, so no option may be a positive attribute, whatever the types say
    types = {"big": ("size",), "small": ("size",), "tiny": ("size",), "huge": ("size",), "large": ("size",),
             "little": ("size",)}
    for seed in range(20):
        row = {"instance_id": str(seed), "object_name": "box", "positive_attributes": ["big", "small"],
               "negative_attributes": ["small", "tiny", "huge", "large", "little"], "_types": types}
        _, options, gold, _ = make_question(row, seed)
        assert set(options) - {options[gold]} <= {"tiny", "huge", "large", "little"}


# --- hostile annotation files: one line naming the file, never a traceback (issue 33 item 8) -------------

def test_a_deeply_nested_annotation_file_is_one_error_naming_it(rgpt, vaw, tmp_path):
    """A JSON file of 100,000 ``[`` crashed ``vrh data convert`` with a RecursionError traceback."""
    deep = tmp_path / "deep"
    deep.mkdir()
    (deep / "SpatialRGPT-Bench_v1.json").write_text("\n[" + "[" * 100_000)
    with pytest.raises(ValueError, match=r"SpatialRGPT-Bench_v1.json is not valid JSON \(nested too deeply to read, "
                                         r"past 100 levels at line 2, column 101\)"):
        convert("spatialrgpt", deep, tmp_path / "out1")
    entries = (vaw / "val.json").read_text()
    (vaw / "val.json").write_text("[" * 100_000)
    with pytest.raises(ValueError, match=r"val.json is not valid JSON \(nested too deeply to read"):
        convert("vaw", vaw, tmp_path / "out2")
    (vaw / "val.json").write_text(entries)
    (vaw / "attribute_types.json").write_text('["color"]')
    with pytest.raises(ValueError, match=r"attribute_types.json is not VAW's attribute_types.json"):
        convert("vaw", vaw, tmp_path / "out3")
    # a JSONL copy: the deep line is one counted skip, with its reason
    lines = (rgpt / "val_SpatialRGPT-Bench.jsonl").read_text()
    (rgpt / "val_SpatialRGPT-Bench.jsonl").write_text(lines + "[" * 100_000 + "\n")
    with pytest.raises(ValueError, match="rows skipped"):  # this fixture's bad rows are over half of it
        convert("spatialrgpt", rgpt, tmp_path / "out4", progress=False, subset="qualitative")
    reason = skipped(tmp_path / "out4")["spatialrgpt-val-9"]
    assert reason == "invalid JSON (nested more than 100 levels deep at column 101)"
