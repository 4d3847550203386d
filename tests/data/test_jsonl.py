import json
from pathlib import Path

import pytest
from PIL import Image

from vrh.data import (
    DatasetError,
    LoadReport,
    Sample,
    dataset_hash,
    load_dataset,
    split_detect_eval,
    write_dataset,
)

W, H = 64, 48


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "images").mkdir()
    Image.new("RGB", (W, H), "red").save(tmp_path / "images" / "a.png")
    Image.new("RGB", (32, 32), "blue").save(tmp_path / "images" / "b.png")
    return tmp_path


def grounding(id="g1", **kw):
    rec = {"id": id, "image": "images/a.png", "task": "grounding", "expression": "the red square",
           "box": [4, 6, 40, 30], "box_format": "xyxy"}
    rec.update(kw)
    return rec


def vqa(id="q1", **kw):
    rec = {"id": id, "image": "images/b.png", "task": "vqa", "question": "What color?", "answer": "blue"}
    rec.update(kw)
    return rec


def write_lines(folder: Path, lines, name="data.jsonl") -> Path:
    path = folder / name
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return path


# --- loading --------------------------------------------------------------------------------------


def test_load_grounding_and_vqa(folder):
    path = write_lines(folder, [grounding(source="refcoco", split="val"), "", vqa()])
    samples = load_dataset(path)
    assert [s.id for s in samples] == ["g1", "q1"]
    g, q = samples
    assert g == Sample(id="g1", image_path=(folder / "images" / "a.png").resolve(), task="grounding",
                       expression="the red square", box=(4.0, 6.0, 40.0, 30.0), image_size=(W, H),
                       meta={"source": "refcoco", "split": "val"})
    assert all(isinstance(v, float) for v in g.box)
    assert q.task == "vqa" and q.question == "What color?" and q.answer == "blue" and q.box is None
    assert q.image_size == (32, 32) and q.meta == {}
    assert samples.report.n_loaded == 2 and samples.report.skipped == []
    assert g.load_image().size == (W, H)
    hash(g)  # usable in sets / as dict keys despite the meta dict


def test_one_task_of_a_mixed_file(folder):
    """The README's five-liner failed on a file that mixes grounding and VQA lines, which the format allows
    (issue 46 item 15): ``task=`` loads one task and counts the valid lines of the others."""
    path = write_lines(folder, [grounding(), vqa(), grounding("g2"), vqa("q2"), vqa("q3")])
    samples = load_dataset(path, task="grounding")
    assert [s.id for s in samples] == ["g1", "g2"] and samples.report.other_tasks == {"vqa": 3}
    assert [s.id for s in load_dataset(path, task="vqa", limit=2)] == ["q1", "q2"]
    assert load_dataset(path).report.other_tasks == {}
    with pytest.raises(DatasetError, match=r"data.jsonl:6: duplicate id 'q1'"):  # a passed-over line still checked
        load_dataset(write_lines(folder, [grounding(), vqa(), grounding("g2"), vqa("q2"), vqa("q3"), vqa()]),
                     task="grounding")
    with pytest.raises(ValueError, match="task must be one of"):
        load_dataset(path, task="detection")


def test_an_xywh_box_declared_xyxy_gets_the_xywh_hint(folder):
    """[x, y, w, h] written with box_format xyxy has x2 <= x1: the error now names the format it fits."""
    with pytest.raises(DatasetError, match=r'non-positive area .*declare box_format "xywh"'):
        load_dataset(write_lines(folder, [grounding(box=[20, 10, 12, 8])]))
    with pytest.raises(DatasetError) as bad:  # not a width and height either: no hint
        load_dataset(write_lines(folder, [grounding(box=[20, 10, -4, 8])]))
    assert "declare box_format" not in str(bad.value)


def test_xywh_is_converted(folder):
    (s,) = load_dataset(write_lines(folder, [grounding(box=[4, 6, 10, 20], box_format="xywh")]))
    assert s.box == (4.0, 6.0, 14.0, 26.0)


def test_absolute_image_path(folder, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("other") / "data.jsonl"
    elsewhere.write_text(json.dumps(grounding(image=str(folder / "images" / "a.png"))) + "\n")
    (s,) = load_dataset(elsewhere)
    assert s.image_path == (folder / "images" / "a.png").resolve()


def test_box_within_tolerance_is_clipped(folder):
    (s,) = load_dataset(write_lines(folder, [grounding(box=[-0.5, 0, W + 1, H])]))
    assert s.box == (0.0, 0.0, float(W), float(H))


def test_limit(folder):
    path = write_lines(folder, [grounding(id=f"g{i}") for i in range(5)])
    assert [s.id for s in load_dataset(path, limit=2)] == ["g0", "g1"]
    assert load_dataset(path, limit=0) == []


def test_check_images_off(folder):
    (s,) = load_dataset(write_lines(folder, [grounding(image="images/missing.png", box=[0, 0, 500, 500])]),
                        check_images=False)
    assert s.image_size is None  # nothing read, no bounds check possible
    with pytest.raises(FileNotFoundError):
        s.read_image_size()
    (s,) = load_dataset(write_lines(folder, [grounding()]), check_images=False)
    assert s.read_image_size() == (W, H)


# --- normalised boxes -------------------------------------------------------------------------------


@pytest.mark.parametrize("box, fmt, expected", [
    ([0.25, 0.5, 0.75, 1.0], "xyxy_norm", (16.0, 24.0, 48.0, 48.0)),  # image a is 64x48
    ([0.25, 0.5, 0.5, 0.25], "xywh_norm", (16.0, 24.0, 48.0, 36.0)),
    ([250, 500, 750, 1000], "xyxy_1000", (16.0, 24.0, 48.0, 48.0)),
])
def test_scaled_formats_are_converted_to_pixels(folder, box, fmt, expected):
    (s,) = load_dataset(write_lines(folder, [grounding(box=box, box_format=fmt)]))
    assert s.box == expected
    # the size is read for the conversion even when images are not otherwise checked
    (s,) = load_dataset(write_lines(folder, [grounding(box=box, box_format=fmt)]), check_images=False)
    assert s.box == expected and s.image_size is None


def test_scaled_box_written_back_as_pixels(folder, tmp_path):
    (s,) = load_dataset(write_lines(folder, [grounding(box=[0.25, 0.5, 0.75, 1.0], box_format="xyxy_norm")]))
    out = json.loads(write_dataset([s], folder / "out.jsonl").read_text())
    assert out["box"] == [16.0, 24.0, 48.0, 48.0] and out["box_format"] == "xyxy"


@pytest.mark.parametrize("fmt", ["xyxy", "xywh"])
def test_pixel_box_that_looks_normalised_is_refused(folder, fmt):
    path = write_lines(folder, [vqa("ok"), grounding(box=[0.1, 0.2, 0.5, 0.6], box_format=fmt)])
    with pytest.raises(DatasetError) as e:
        load_dataset(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:2: ") and "looks normalised (0-1)" in msg and "64x48" in msg
    assert f'"{fmt}_norm"' in msg and "convert it to pixels" in msg
    # without the image size there is nothing to compare with: loaded as written
    (_, s) = load_dataset(path, check_images=False)
    assert s.box is not None


def test_tiny_box_on_tiny_image_is_not_called_normalised(folder):
    Image.new("RGB", (8, 8), "green").save(folder / "images" / "tiny.png")
    (s,) = load_dataset(write_lines(folder, [grounding(image="images/tiny.png", box=[0, 0, 1, 1])]))
    assert s.box == (0.0, 0.0, 1.0, 1.0)


def test_box_overflowing_in_0_1000_hints_at_xyxy_1000(folder):
    path = write_lines(folder, [grounding(box=[250, 500, 750, 1000])])
    with pytest.raises(DatasetError, match="outside the 64x48 image.*box_format \"xyxy_1000\""):
        load_dataset(path)
    with pytest.raises(DatasetError) as e:  # beyond 1000 it is not the 0-1000 convention: no hint
        load_dataset(write_lines(folder, [grounding(box=[250, 500, 750, 1200])]))
    assert "outside the 64x48 image" in str(e.value) and "xyxy_1000" not in str(e.value)


def test_scaled_box_outside_its_range_is_refused(folder):
    with pytest.raises(DatasetError, match="outside the 64x48 image"):
        load_dataset(write_lines(folder, [grounding(box=[0.1, 0.2, 1.5, 0.6], box_format="xyxy_norm")]))


# --- validation errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("line, reason", [
    ("{not json", "invalid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({k: v for k, v in grounding().items() if k != "id"}, r"missing field\(s\) \['id'\]"),
    ({k: v for k, v in grounding().items() if k != "image"}, "missing field"),
    (grounding(id=7), "'id' must be a non-empty string"),
    (grounding(task="caption"), "unknown task 'caption'"),
    ({k: v for k, v in grounding().items() if k != "expression"}, "needs 'expression'"),
    (grounding(expression="  "), "'expression' must be a non-empty string"),
    ({k: v for k, v in grounding().items() if k != "box"}, "needs 'box'"),
    ({k: v for k, v in grounding().items() if k != "box_format"}, "explicit 'box_format'"),
    (grounding(box_format="cxcywh"), "unknown box_format 'cxcywh'"),
    (grounding(box=[1, 2, 3]), "list of 4 numbers"),
    (grounding(box=[1, 2, "3", 4]), "list of 4 numbers"),
    (grounding(box=[40, 6, 4, 30]), "non-positive area"),
    (grounding(box=[4, 6, 4, 30]), "non-positive area"),
    (grounding(box=[4, 6, 0, 10], box_format="xywh"), "non-positive area"),
    (grounding(box=[4, 6, W + 2, 30]), "outside the 64x48 image"),
    (grounding(box=[-2, 6, 40, 30]), "outside the 64x48 image"),
    (grounding(image="images/missing.png"), "image file not found"),
    ({k: v for k, v in vqa().items() if k != "answer"}, "needs 'answer'"),
    (vqa(answer_type="fuzzy"), "unknown answer_type 'fuzzy'"),
    (vqa(answer_type=None), "unknown answer_type None"),
    (vqa(answer="two", answer_type="number"), "answer 'two' does not fit answer_type 'number'"),
    (vqa(answer="AB", answer_type="choice"), "one option letter A-Z"),
    (vqa(answer="?"), "answer '\\?' does not fit answer_type 'exact'"),
    (grounding(answer_type="exact"), "'answer_type' applies to vqa samples only"),
])
def test_errors_name_file_and_line(folder, line, reason):
    path = write_lines(folder, [vqa("ok"), line])
    with pytest.raises(DatasetError, match=reason) as e:
        load_dataset(path)
    assert str(e.value).startswith(f"{path}:2: ")


def test_nan_box_rejected(folder):
    path = write_lines(folder, ['{"id": "g", "image": "images/a.png", "task": "grounding", "expression": "x",'
                                ' "box": [NaN, 1, 2, 3], "box_format": "xyxy"}'])
    with pytest.raises(DatasetError, match="non-finite"):
        load_dataset(path)


def test_unreadable_image(folder):
    (folder / "images" / "bad.png").write_bytes(b"not an image")
    with pytest.raises(DatasetError, match="cannot read image"):
        load_dataset(write_lines(folder, [grounding(image="images/bad.png")]))


def test_duplicate_ids(folder):
    path = write_lines(folder, [grounding("x"), vqa("y"), vqa("x")])
    with pytest.raises(DatasetError, match=r":3: duplicate id 'x' \(first on line 1\)"):
        load_dataset(path)


def test_missing_dataset_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset file not found"):
        load_dataset(tmp_path / "nope.jsonl")


def test_bad_on_error(folder):
    with pytest.raises(ValueError, match="on_error"):
        load_dataset(write_lines(folder, [vqa()]), on_error="ignore")


def test_skip_mode_reports_lines(folder):
    path = write_lines(folder, [
        grounding("a"),
        "{broken",
        grounding("b", box_format="polar"),
        "",
        vqa("a"),  # duplicate of line 1
        grounding("c", image="images/missing.png"),
        vqa("d"),
    ])
    samples = load_dataset(path, on_error="skip")
    assert [s.id for s in samples] == ["a", "d"]
    report = samples.report
    assert isinstance(report, LoadReport) and report.path == path
    assert report.n_loaded == 2 and report.n_skipped == 4
    assert [line for line, _ in report.skipped] == [2, 3, 5, 6]
    assert "invalid JSON" in report.skipped[0][1]
    assert "polar" in report.skipped[1][1]
    assert "duplicate id 'a'" in report.skipped[2][1]
    assert "not found" in report.skipped[3][1]


def test_answer_type(folder):
    path = write_lines(folder, [vqa("q1"), vqa("q2", answer="B", answer_type="choice"),
                                vqa("q3", answer=" -2.5", answer_type="number"), vqa("q4", answer_type="exact")])
    samples = load_dataset(path)
    assert [s.answer_type for s in samples] == ["exact", "choice", "number", "exact"]
    assert all("answer_type" not in s.meta for s in samples)
    assert samples[2].answer == " -2.5"  # kept as written; only its form was checked


def test_answer_type_checked_on_construction():
    with pytest.raises(ValueError, match="unknown answer_type 'multi'"):
        Sample(id="q", image_path=Path("x.png"), task="vqa", question="q", answer="a", answer_type="multi")
    with pytest.raises(ValueError, match="does not fit answer_type 'choice'"):
        Sample(id="q", image_path=Path("x.png"), task="vqa", question="q", answer="cat", answer_type="choice")


# --- writing and hashing -----------------------------------------------------------------------------


def test_write_round_trip(folder):
    src = write_lines(folder, [grounding(box=[4, 6, 10, 20], box_format="xywh", source="x"), vqa(),
                               vqa("q2", difficulty=3, tags=["color"])])
    samples = load_dataset(src)
    out = write_dataset(samples, folder / "copy.jsonl")
    first = json.loads(out.read_text().splitlines()[0])
    assert first["image"] == "images/a.png"  # relative to the dataset folder
    assert first["box"] == [4.0, 6.0, 14.0, 26.0] and first["box_format"] == "xyxy"
    assert first["source"] == "x"
    assert load_dataset(out) == samples
    assert not (folder / "copy.jsonl.tmp").exists()


def test_write_round_trips_answer_type(folder):
    src = write_lines(folder, [vqa("q1"), vqa("q2", answer="3", answer_type="number")])
    out = write_dataset(load_dataset(src), folder / "copy.jsonl")
    lines = [json.loads(l) for l in out.read_text().splitlines()]
    assert "answer_type" not in lines[0]  # the default stays implicit: old files are rewritten byte for byte
    assert lines[1]["answer_type"] == "number"
    assert [s.answer_type for s in load_dataset(out)] == ["exact", "number"]
    assert out.read_bytes() == write_dataset(load_dataset(out), folder / "again.jsonl").read_bytes()


def test_write_outside_folder_uses_absolute_paths(folder, tmp_path_factory):
    samples = load_dataset(write_lines(folder, [vqa()]))
    out = write_dataset(samples, tmp_path_factory.mktemp("elsewhere") / "sub" / "d.jsonl")
    assert Path(json.loads(out.read_text())["image"]).is_absolute()
    assert load_dataset(out) == samples


def test_write_rejects_meta_shadowing_fields(folder, tmp_path):
    s = Sample(id="a", image_path=folder / "images" / "a.png", task="vqa", question="q", answer="a",
               meta={"box": [0, 0, 1, 1]})
    with pytest.raises(ValueError, match="shadow"):
        write_dataset([s], tmp_path / "x.jsonl")


def test_dataset_hash(folder):
    a = write_lines(folder, [vqa()], "a.jsonl")
    b = write_lines(folder, [vqa()], "b.jsonl")
    c = write_lines(folder, [vqa("other")], "c.jsonl")
    import hashlib

    assert dataset_hash(a) == hashlib.sha256(a.read_bytes()).hexdigest()
    assert dataset_hash(a) == dataset_hash(b) != dataset_hash(c)
    assert len(dataset_hash(a)) == 64


# --- detection / evaluation split ---------------------------------------------------------------------


def make_samples(n):
    return [Sample(id=f"s{i:03d}", image_path=Path(f"{i}.png"), task="vqa", question="q", answer="a")
            for i in range(n)]


def test_split_disjoint_and_deterministic():
    samples = make_samples(50)
    det, ev = split_detect_eval(samples, 20, 15, seed=3)
    assert len(det) == 20 and len(ev) == 15
    assert not {s.id for s in det} & {s.id for s in ev}
    assert split_detect_eval(samples, 20, 15, seed=3) == (det, ev)
    assert split_detect_eval(samples, 20, 15, seed=4) != (det, ev)
    # input order does not matter; each set keeps the input order
    det_r, ev_r = split_detect_eval(samples[::-1], 20, 15, seed=3)
    assert {s.id for s in det_r} == {s.id for s in det} and {s.id for s in ev_r} == {s.id for s in ev}
    assert [s.id for s in det] == sorted(s.id for s in det)


def test_split_eval_rest_and_stable_detection_set():
    samples = make_samples(30)
    det, ev = split_detect_eval(samples, 10, None, seed=0)
    assert len(det) == 10 and len(ev) == 20
    assert split_detect_eval(samples, 10, 5, seed=0)[0] == det  # n_eval never moves the detection set
    assert {s.id for s in split_detect_eval(samples, 10, 5, seed=0)[1]} <= {s.id for s in ev}


def test_split_errors():
    samples = make_samples(10)
    with pytest.raises(ValueError, match="cannot take"):
        split_detect_eval(samples, 8, 3, seed=0)
    with pytest.raises(ValueError, match=">= 0"):
        split_detect_eval(samples, -1, 3, seed=0)
    with pytest.raises(ValueError, match="unique"):
        split_detect_eval(samples + samples[:1], 2, 2, seed=0)


# --- hostile and broken input: a file:line error at load, never a crash mid-run -------------------------
def test_a_null_box_is_a_line_error(folder):
    path = write_lines(folder, [grounding(), grounding(id="g2", box=None)])
    with pytest.raises(DatasetError, match=r"data.jsonl:2: grounding sample needs 'box' \(it is null\)"):
        load_dataset(path)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_a_truncated_image_whose_header_reads_fine_is_a_line_error(folder, fmt):
    import io

    buf = io.BytesIO()
    Image.effect_noise((256, 256), 80).convert("RGB").save(buf, fmt)  # noise: little to compress
    data = buf.getvalue()
    (folder / "images" / "t.img").write_bytes(data[: len(data) // 2])
    with Image.open(folder / "images" / "t.img") as im:
        assert im.size == (256, 256)  # the header still reads
    path = write_lines(folder, [grounding(), grounding(id="g2", image="images/t.img")])
    with pytest.raises(DatasetError, match=r"data.jsonl:2: cannot read image .*t.img"):
        load_dataset(path)


@pytest.mark.parametrize("text", ["\u200b\u200c\u200d", "\u202e\u2066 \u2069", "\ufeff\u00ad", " \t\u3000"])
def test_an_expression_of_only_invisible_characters_is_refused(folder, text):
    path = write_lines(folder, [grounding(expression=text)])
    with pytest.raises(DatasetError, match="data.jsonl:1: 'expression' must be a non-empty string with visible"):
        load_dataset(path)
    assert load_dataset(write_lines(folder, [grounding(expression="\u200bthe mug")]))[0].expression == "\u200bthe mug"


def test_a_line_that_is_not_utf8_names_file_line_and_byte(folder):
    path = folder / "data.jsonl"
    path.write_bytes((json.dumps(grounding()) + "\n").encode() + b'{"id": "g2\xff"}\n')
    with pytest.raises(DatasetError, match=r"data.jsonl:2: not UTF-8 \(byte 0xff at column 11\)"):
        load_dataset(path)


def test_symlink_loops_are_clear_errors(folder):
    (folder / "images" / "x.png").symlink_to(folder / "images" / "y.png")
    (folder / "images" / "y.png").symlink_to(folder / "images" / "x.png")
    path = write_lines(folder, [grounding(image="images/x.png")])
    with pytest.raises(DatasetError, match="data.jsonl:1: "):
        load_dataset(path)
    (folder / "loop.jsonl").symlink_to(folder / "loop.jsonl")
    with pytest.raises(FileNotFoundError, match="loop.jsonl is a symlink that leads nowhere"):
        load_dataset(folder / "loop.jsonl")


def test_a_bbox_key_gets_a_hint_and_json_errors_read_well(folder):
    rec = grounding()
    rec["bbox"] = rec.pop("box")
    with pytest.raises(DatasetError, match="needs 'box'; this line has 'bbox': vrh's field is 'box', with its"):
        load_dataset(write_lines(folder, [rec]))
    (folder / "bad.jsonl").write_text('{"id": "unterminated')
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: invalid JSON at column 8: the string that opens here is "
                                           r"not closed before the line ends \(a missing '\"'\?\)$"):
        load_dataset(folder / "bad.jsonl")


@pytest.mark.parametrize("line, expected", [
    # a missing closing brace was "column 1: Expecting ',' delimiter" (the newline put the end on "line 2")
    ('{"id": "g1", "box": [4, 6, 40, 30]', "column 35: the line ends before its JSON is complete: a closing '}' "
                                           "missing? (Expecting ',' delimiter)"),
    ('{"id": "g1", "box": [4, 6, 40, 30', "column 34: the line ends before its JSON is complete: a closing ']}' "
                                          "missing? (Expecting ',' delimiter)"),
    # a cut-off string ended "Invalid control character at" (the newline), a dangling "at"
    ('{"id": "g1", "image": "images/a.p', "column 23: the string that opens here is not closed before the line "
                                         "ends (a missing '\"'?)"),
    ('{"id": "g\t1"}', "column 10: a raw control character (U+0009) inside a string: write it as \\t"),
    ('{"id": "g1"} {"id": "g2"}', "column 14: text after the JSON value has ended (one record per line)"),
    ('{"id": "g1", "box": [4, 6, 40, 30], }', "column 37: Expecting property name enclosed in double quotes"),
])
@pytest.mark.parametrize("ending", ["\n", "\r\n", ""])
def test_a_json_error_names_the_place_and_the_problem(folder, line, expected, ending):
    """Where the error is, said in a user's words (issue 37 item 9), whatever the line ending."""
    (folder / "bad.jsonl").write_text(json.dumps(grounding()) + "\n" + line + ending, newline="")
    with pytest.raises(DatasetError) as err:
        load_dataset(folder / "bad.jsonl")
    assert str(err.value) == f"{folder / 'bad.jsonl'}:2: invalid JSON at {expected}"


def test_a_deeply_nested_line_is_a_line_error_and_a_skip(folder):
    """A line of 100,000 ``[`` escaped as a RecursionError traceback, ``on_error="skip"`` included (issue 33
    item 8): it is invalid JSON naming file, line and column, skipped like any other bad line."""
    deep = folder / "deep.jsonl"
    deep.write_text(json.dumps(grounding()) + "\n" + "[" * 100_000 + "\n" + json.dumps(vqa()) + "\n")
    with pytest.raises(DatasetError, match=r"deep.jsonl:2: invalid JSON at column 101: nested more than 100 levels"):
        load_dataset(deep)
    samples = load_dataset(deep, on_error="skip")
    assert [s.id for s in samples] == ["g1", "q1"] and [n for n, _ in samples.report.skipped] == [2]
    # a value the parser could read but no dataset needs: the line (an object) may nest 100 levels, not 101
    nested = lambda n: json.loads("[" * n + "]" * n)  # noqa: E731
    assert len(load_dataset(write_lines(folder, [grounding(extra=nested(99))]))) == 1
    with pytest.raises(DatasetError, match=r"data.jsonl:1: invalid JSON at column \d+: nested more than 100"):
        load_dataset(write_lines(folder, [grounding(extra=nested(100))]))
    kept = write_lines(folder, [grounding(extra={"a": "[" * 500, "b": [[1, 2], {"c": [3]}]})])  # brackets in text
    assert load_dataset(kept)[0].meta["extra"]["a"] == "[" * 500


def test_a_command_given_a_deeply_nested_dataset_fails_in_one_line(folder, tmp_path, capsys):
    from vrh.cli import main

    deep = folder / "deep.jsonl"
    deep.write_text("[" * 100_000 + "\n")
    assert main(["detect", "--model", "organism", "--data", str(deep), "--out", str(tmp_path / "det")]) == 2
    err = capsys.readouterr().err
    assert err == f"vrh detect: error: {deep}:1: invalid JSON at column 101: nested more than 100 levels deep\n"


def test_a_utf8_bom_at_the_start_is_accepted(folder):
    """Windows tools (Notepad, PowerShell's Out-File) write a BOM first: the first record reads as any other
    (issue 45 item 17); a BOM elsewhere stays the text it is."""
    path = write_lines(folder, [grounding("g1"), grounding("g2")])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert [s.id for s in load_dataset(path)] == ["g1", "g2"]
