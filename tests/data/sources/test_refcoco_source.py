"""RefCOCO/+/g in the lmms-lab parquet layout, including malformed rows."""

import io
import json

import pytest
from PIL import Image

from vrh.data import load_dataset
from vrh.data.sources import convert, get_source
from vrh.data.sources.refcoco import expressions


def png(w=64, h=48):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


def row(qid, bbox=(10, 8, 20, 16), answer=("the red box", "red thing"), image=None, file_name="COCO_1.jpg"):
    return {"question_id": str(qid), "image": {"bytes": png() if image is None else image, "path": None},
            "question": "Please carefully observe the area circled in the image and come up with a caption.",
            "answer": list(answer), "segmentation": [1.0, 2.0], "bbox": list(bbox), "iscrowd": 0,
            "file_name": file_name}


@pytest.fixture
def snapshot(tmp_path, write_parquet):
    """A RefCOCO folder: data/val-*.parquet in two shards with good and malformed rows (as many, so the
    conversion passes the more-than-half-skipped check), plus a testA shard."""
    good = [row(i) for i in range(6)]
    bad = [row(10, bbox=(10, 8, -5, 16)),  # negative width
           row(11, bbox=(50, 40, 30, 30)),  # box outside the 64x48 image
           row(12, image=b""),  # missing image bytes
           row(13, image=png()[:60]),  # corrupt (truncated) image
           row(14, answer=("  ",)),  # empty expression
           row(15, bbox=(1, 2, 3))]  # not 4 numbers
    write_parquet(tmp_path / "RefCOCO" / "data" / "val-00000-of-00002.parquet", good[:2] + bad[:3])
    write_parquet(tmp_path / "RefCOCO" / "data" / "val-00001-of-00002.parquet", good[2:] + bad[3:])
    write_parquet(tmp_path / "RefCOCO" / "data" / "testA-00000-of-00001.parquet", [row(100)])
    return tmp_path / "RefCOCO"


def test_a_split_converts_to_a_loadable_file_with_pixel_xyxy_boxes(snapshot, tmp_path):
    rep = convert("refcoco", snapshot, tmp_path / "out", progress=False)
    samples = load_dataset(tmp_path / "out" / "data.jsonl")
    assert rep.split == "val" and rep.rows_read == 12 and rep.n_samples == 6 and len(samples) == 6
    s = samples[0]
    assert s.id == "refcoco-val-0" and s.task == "grounding" and s.expression == "the red box"
    assert s.box == (10.0, 8.0, 30.0, 24.0)  # xywh [10, 8, 20, 16] -> xyxy
    assert s.meta["expressions"] == ["the red box", "red thing"] and s.meta["question_id"] == "0"
    # six rows share one COCO file name and bytes: one image written
    assert rep.n_images == 1 and [p.name for p in (tmp_path / "out" / "images").iterdir()] == ["COCO_1.png"]


def test_malformed_rows_are_counted_skips_with_id_and_reason(snapshot, tmp_path):
    rep = convert("refcoco", snapshot, tmp_path / "out", progress=False)
    skipped = [json.loads(l) for l in (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()]
    reasons = {s["id"]: s["reason"] for s in skipped}
    assert len(rep.skipped) == 6 == len(skipped)
    assert "non-positive width" in reasons["refcoco-val-10"]
    assert "outside the 64x48 image" in reasons["refcoco-val-11"]
    assert reasons["refcoco-val-12"] == "missing image bytes"
    assert "unreadable image" in reasons["refcoco-val-13"]
    assert "empty expression" in reasons["refcoco-val-14"]
    assert "4 finite numbers" in reasons["refcoco-val-15"]
    summary = json.loads((tmp_path / "out" / "convert.json").read_text())
    assert summary["n_skipped"] == 6 and summary["n_samples"] == 6 and summary["skip_rate"] == 0.5
    assert any("skipped" in line for line in rep.lines())


def test_all_expressions_makes_one_sample_per_expression(snapshot, tmp_path):
    rep = convert("refcoco", snapshot, tmp_path / "out", progress=False, all_expressions=True)
    samples = load_dataset(tmp_path / "out" / "data.jsonl")
    assert rep.n_samples == 12
    assert [s.id for s in samples[:2]] == ["refcoco-val-0:0", "refcoco-val-0:1"]
    assert [s.expression for s in samples[:2]] == ["the red box", "red thing"]


def test_split_limit_and_row_count_check(snapshot, tmp_path, write_parquet):
    rep = convert("refcoco", snapshot, tmp_path / "a", split="testA", progress=False)
    assert rep.n_samples == 1 and rep.expected_rows is None and rep.rows_match is None
    rep = convert("refcoco", snapshot, tmp_path / "b", limit=2, progress=False)
    assert rep.n_samples == 2 and not rep.complete and rep.rows_match is None  # a partial split is not checked
    rep = convert("refcoco+", snapshot, tmp_path / "c", progress=False)
    assert rep.complete and rep.expected_rows == 3805 and rep.rows_match is False
    assert any("published refcoco+ val has 3805 rows" in line for line in rep.lines())


def test_a_single_parquet_file_is_read_as_it_is(tmp_path, write_parquet):
    f = write_parquet(tmp_path / "rc.parquet", [row(1), row(2, file_name="COCO_2.jpg", image=png(32, 32))])
    rep = convert("refcocog", f, tmp_path / "out", progress=False)
    assert rep.n_samples == 2 and rep.n_images == 2


def test_snapshot_level_problems_are_errors_before_anything_is_written(snapshot, tmp_path, write_parquet):
    with pytest.raises(ValueError, match=r"no parquet files for split 'test'.*splits found: testA, val"):
        convert("refcoco", snapshot, tmp_path / "out", split="test")
    assert not (tmp_path / "out").exists()
    wrong = write_parquet(tmp_path / "x.parquet", [{"question": "q", "answer": "a"}])
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['question_id', 'image', 'bbox'\]"):
        convert("refcoco", wrong, tmp_path / "out")
    with pytest.raises(ValueError, match="unknown data source 'refcoco2'.*refcoco\\+"):
        convert("refcoco2", snapshot, tmp_path / "out")
    with pytest.raises(ValueError, match="--images do not apply to source 'refcoco'"):
        convert("refcoco", snapshot, tmp_path / "out", images="x")


def test_a_previous_conversion_is_kept_unless_overwrite(snapshot, tmp_path):
    convert("refcoco", snapshot, tmp_path / "out", limit=1, progress=False)
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--overwrite"):
        convert("refcoco", snapshot, tmp_path / "out", progress=False)
    convert("refcoco", snapshot, tmp_path / "out", progress=False, overwrite=True)
    assert len(load_dataset(tmp_path / "out" / "data.jsonl")) == 6
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_overwrite_removes_only_the_images_vrh_wrote(snapshot, tmp_path):
    """Issue 33 item 3: ``images/`` was removed whole, the user's files in it with it."""
    out = tmp_path / "out"
    convert("refcoco", snapshot, out, progress=False)
    mine = out / "images" / "my_photo.jpg"
    mine.write_bytes(b"mine")
    with pytest.raises(FileExistsError, match="images/my_photo.jpg"):
        convert("refcoco", snapshot, out, limit=1, progress=False, overwrite=True)
    assert mine.read_bytes() == b"mine" and len(load_dataset(out / "data.jsonl")) == 6  # nothing was removed
    mine.unlink()
    convert("refcoco", snapshot, out, limit=1, progress=False, overwrite=True)
    assert len(load_dataset(out / "data.jsonl")) == 1 and len(list((out / "images").iterdir())) == 1


def test_overwrite_refuses_artefact_names_vrh_has_no_record_of(tmp_path, snapshot):
    out = tmp_path / "out"
    (out / "images").mkdir(parents=True)
    (out / "images" / "a.png").write_bytes(b"mine")
    with pytest.raises(FileExistsError, match="no record of writing \\(images\\)"):
        convert("refcoco", snapshot, out, progress=False, overwrite=True)
    assert (out / "images" / "a.png").read_bytes() == b"mine"


def test_refcoco_sources_declare_their_published_splits():
    assert get_source("refcoco").splits == ("val", "test", "testA", "testB")
    assert get_source("refcoco+").expected_rows == {"val": 3805}
    assert get_source("refcocog").expected_rows == {"val": 7573}
    assert get_source("refcoco").expected_rows == {"val": 8811}


def test_expression_choice():
    assert expressions(["  a   b "], False) == [(0, "a b")]
    with pytest.raises(ValueError, match=r"answer\[1\]"):
        expressions(["a", ""], True)
    with pytest.raises(ValueError, match="empty expression"):
        expressions([], False)
