"""Toloka WSDM Cup 2023 (CSV + local image folder) and RefSpatial-Bench (image + mask parquet)."""

import csv
import io
import json

import pytest
from PIL import Image

from vrh.data import load_dataset
from vrh.data.sources import convert
from vrh.data.sources.images import mask_box

URL = "https://tlk.s3.yandex.net/wsdm2023/{}"
COLUMNS = ["image", "width", "height", "left", "top", "right", "bottom", "question"]


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.fixture
def toloka(tmp_path):
    (tmp_path / "images").mkdir()
    Image.new("RGB", (60, 40), "white").save(tmp_path / "images" / "a.jpg")
    Image.new("RGB", (30, 30), "white").save(tmp_path / "images" / "b.jpg")
    rows = [{"image": URL.format("a.jpg"), "width": 60, "height": 40, "left": 5, "top": 6, "right": 25, "bottom": 30,
             "question": "What do you sit on?"},
            {"image": URL.format("a.jpg"), "width": 60, "height": 40, "left": 30, "top": 6, "right": 20, "bottom": 30,
             "question": "What is inverted?"},  # right < left
            {"image": URL.format("b.jpg"), "width": 60, "height": 40, "left": 1, "top": 1, "right": 5, "bottom": 5,
             "question": "What is resized?"},  # local image differs from the CSV's size
            {"image": URL.format("a.jpg"), "width": 60, "height": 40, "left": 5, "top": 6, "right": 99, "bottom": 30,
             "question": "What sticks out?"},
            {"image": URL.format("a.jpg"), "width": 60, "height": 40, "left": 5, "top": 6, "right": 25, "bottom": 30,
             "question": " "}]
    rows += [{**rows[0], "question": f"What do you sit on? ({i})"} for i in range(3)]  # good rows: half skipped
    return write_csv(tmp_path / "test_public.csv", rows)


def test_toloka_resolves_images_by_file_name_and_skips_bad_rows(toloka, tmp_path):
    rep = convert("toloka", toloka.parent, tmp_path / "out", progress=False)
    s = load_dataset(tmp_path / "out" / "data.jsonl")[0]
    assert s.id == "toloka-test_public-0" and s.expression == "What do you sit on?" and s.box == (5, 6, 25, 30)
    assert s.meta["url"] == URL.format("a.jpg") and rep.expected_rows == 1705 and rep.rows_match is False
    lines = (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()
    reasons = {r["id"]: r["reason"] for r in map(json.loads, lines)}
    assert "non-positive width" in reasons["toloka-test_public-1"]
    assert reasons["toloka-test_public-2"] == "image b.jpg is 30x30 but the CSV says 60x40"
    assert "outside the 60x40 image" in reasons["toloka-test_public-3"]
    assert reasons["toloka-test_public-4"] == "empty question"


def test_toloka_missing_images_are_one_error_listing_them(toloka, tmp_path):
    rows = list(csv.DictReader(open(toloka)))
    rows += [{**rows[0], "image": URL.format("gone1.jpg")}, {**rows[0], "image": URL.format("gone2.jpg?sig=1")}]
    write_csv(toloka, rows)
    with pytest.raises(FileNotFoundError,
                       match=r"2 image file\(s\) named in .* are not in .*images: gone1.jpg, gone2.jpg"):
        convert("toloka", toloka, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(FileNotFoundError, match="--images DIR"):
        convert("toloka", toloka, tmp_path / "out", images=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="no train.csv .* test_public.csv"):
        convert("toloka", toloka.parent, tmp_path / "out", split="train")


def encoded(im, fmt="PNG"):
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    return buf.getvalue()


def mask(w, h, rect=None):
    m = Image.new("L", (w, h), 0)
    if rect:
        m.paste(255, rect)
    return encoded(m)


def test_mask_box_spans_whole_pixels():
    assert mask_box(mask(10, 8, (3, 5, 4, 6))) == ((3.0, 5.0, 4.0, 6.0), (10, 8))
    with pytest.raises(ValueError, match="mask is empty"):
        mask_box(mask(10, 8))


def test_refspatial_box_is_the_mask_bbox(tmp_path, write_parquet):
    image = {"bytes": encoded(Image.new("RGB", (48, 32), "gray")), "path": None}
    base = {"id": 1, "image": image, "mask": {"bytes": mask(48, 32, (10, 4, 30, 20)), "path": None},
            "object": "the free space left of the cup", "prompt": "Please point to the free space left of the cup.",
            "suffix": "Answer with points (x, y).", "rgb_path": "a.png", "mask_path": "a_mask.png",
            "category": "location", "step": 2}
    rows = [base, {**base, "id": 2, "mask": {"bytes": mask(48, 32), "path": None}},
            {**base, "id": 3, "mask": {"bytes": mask(24, 16, (1, 1, 5, 5)), "path": None}},
            {**base, "id": 4, "object": ""}, {**base, "id": 5}, {**base, "id": 6}]
    write_parquet(tmp_path / "snap" / "data" / "location-00000-of-00001.parquet", rows)
    rep = convert("refspatial", tmp_path / "snap", tmp_path / "out", progress=False)
    s = load_dataset(tmp_path / "out" / "data.jsonl")[0]
    assert rep.split == "location" and rep.expected_rows == 100 and rep.n_samples == 3
    assert s.box == (10.0, 4.0, 30.0, 20.0) and s.expression == "the free space left of the cup"
    assert (tmp_path / "out" / s.meta["mask"]).is_file() and s.meta["suffix"] == "Answer with points (x, y)."
    reasons = [r["reason"] for r in map(json.loads, (tmp_path / "out" / "skipped.jsonl").read_text().splitlines())]
    assert reasons == ["mask is empty (no non-zero pixel)", "mask is 24x16 but the image is 48x32",
                       "empty expression: object is ''"]
    rep = convert("refspatial", tmp_path / "snap", tmp_path / "out2", progress=False, expression="prompt")
    assert load_dataset(tmp_path / "out2" / "data.jsonl")[0].expression.startswith("Please point")


def test_refspatial_point_conversion_is_judged_by_the_point_task(tmp_path, write_parquet):
    from vrh.tasks import get_task

    row = {"id": 7, "image": {"bytes": encoded(Image.new("RGB", (40, 20), "gray")), "path": None},
           "mask": {"bytes": mask(40, 20, (10, 4, 20, 12)), "path": None}, "object": "the cup",
           "prompt": "Please point to the cup.", "step": 1,
           "suffix": "Your answer should be formatted as a list of tuples, i.e. [(x1, y1)], with coordinates "
                     "between 0 and 1."}
    write_parquet(tmp_path / "snap" / "data" / "location-00000-of-00001.parquet", [row, {**row, "id": 8, "suffix": ""}])
    rep = convert("refspatial", tmp_path / "snap", tmp_path / "out", task="point", progress=False)
    [s] = load_dataset(tmp_path / "out" / "data.jsonl")
    assert rep.n_samples == 1 and s.id == "refspatial-location-7" and s.task == "point"
    assert s.question == "Please point to the cup. " + row["suffix"]  # the benchmark's prompt + suffix
    assert s.meta["mask"] == str((tmp_path / "out" / "images" / "refspatial-location-7_mask.png").resolve())
    assert get_task("point").judge(None, s, "[(0.375, 0.4)]", {})["outcome"] == "correct"
    assert get_task("point").judge(None, s, "[(0.1, 0.4)]", {})["outcome"] == "outside"
    assert "empty suffix" in json.loads((tmp_path / "out" / "skipped.jsonl").read_text())["reason"]
    with pytest.raises(ValueError, match="--expression applies to --task grounding"):
        convert("refspatial", tmp_path / "snap", tmp_path / "x", task="point", expression="prompt")
