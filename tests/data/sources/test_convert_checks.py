"""The conversion-level checks every source gets from ``convert`` (issue 29, item 4): a conversion that keeps
no sample from a non-empty input, or skips more than half of the rows it was asked to convert, fails with
the most common skip reasons; rows outside the chosen subset are counted apart and are not skips."""

import csv
import json

import pytest
from PIL import Image

from vrh.cli import main
from vrh.data.sources import convert

COLUMNS = ["image", "width", "height", "left", "top", "right", "bottom", "question"]


def toloka_csv(folder, boxes):
    (folder / "images").mkdir(parents=True)
    Image.new("RGB", (60, 40), "white").save(folder / "images" / "a.jpg")
    with open(folder / "test_public.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for i, box in enumerate(boxes):
            w.writerow({"image": "https://x/wsdm2023/a.jpg", "width": 60, "height": 40, "question": f"What {i}?",
                        **dict(zip(("left", "top", "right", "bottom"), box))})
    return folder / "test_public.csv"


def test_no_sample_from_a_non_empty_file_fails_with_the_skip_reasons(tmp_path, capsys):
    src = toloka_csv(tmp_path / "t", [("", "", "", "")] * 3)  # an unlabelled release: answer columns empty
    with pytest.raises(ValueError, match=r"0 samples from 3 rows.*3 rows skipped \(100%\).*answer box"):
        convert("toloka", src, tmp_path / "out", progress=False)
    summary = json.loads((tmp_path / "out" / "convert.json").read_text())
    assert summary["n_samples"] == 0 and "0 samples from 3 rows" in summary["error"]
    assert len((tmp_path / "out" / "skipped.jsonl").read_text().splitlines()) == 3
    assert not (tmp_path / "out" / "data.jsonl").exists()  # nothing a later run could take for a dataset
    assert main(["data", "convert", "toloka", str(src), "--out", str(tmp_path / "cli")]) == 2
    captured = capsys.readouterr()
    assert "answer box" in captured.err and "matches the published" not in captured.out + captured.err


def test_more_than_half_skipped_fails_and_half_passes(tmp_path):
    good, bad = (5, 6, 25, 30), (30, 6, 20, 30)  # bad: right < left
    with pytest.raises(ValueError, match=r"2 of 3 rows skipped.*non-positive width"):
        convert("toloka", toloka_csv(tmp_path / "a", [good, bad, bad]), tmp_path / "oa", progress=False)
    rep = convert("toloka", toloka_csv(tmp_path / "b", [good, good, bad, bad]), tmp_path / "ob", progress=False)
    assert (rep.n_samples, len(rep.skipped)) == (2, 2)
    assert "2 rows skipped (50%)" in rep.lines()[0]


def test_rows_outside_the_subset_are_counted_apart_not_skipped(tmp_path):
    (tmp_path / "scenes").mkdir()
    Image.new("RGB", (40, 30), "white").save(tmp_path / "scenes" / "a.png")

    def line(i, category, qtype, gold):
        return {"id": f"r{i}", "image_info": {"file_path": "scenes/a.png"},
                "text_q": "Is Region [0] behind Region [1]?",
                "conversations": [{"from": "gpt", "value": gold}], "bbox": [[2, 2, 12, 10], [20, 4, 36, 20]],
                "qa_info": {"type": qtype, "category": category}}

    lines = [line(0, "behind_predicate", "qualitative", "Yes."),
             line(1, "height_data", "quantitative", "Region [0] is 2.1 feet in height."),
             line(2, "width_data", "quantitative", "Region [0] is 30 centimeters wide.")]
    (tmp_path / "val_SpatialRGPT-Bench.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    rep = convert("spatialrgpt", tmp_path, tmp_path / "out", progress=False, subset="qualitative")
    assert (rep.rows_read, rep.n_samples, rep.skipped) == (3, 1, [])
    assert rep.excluded == {"quantitative question (not in the qualitative subset)": 2}
    summary = json.loads((tmp_path / "out" / "convert.json").read_text())
    assert summary["n_excluded"] == 2 and summary["n_skipped"] == 0
    assert any("2 rows outside the subset" in x for x in rep.lines())
