"""RefCOCO/+/g from the original refer release: refs(...) + instances.json + a COCO image folder. A pickle
is never opened without --allow-pickle."""

import json
import pickle

import pytest
from PIL import Image

from vrh.data import load_dataset
from vrh.data.sources import convert


def ref(ref_id, ann_id=100, image_id=1, split="val", sentences=("man in red", "left guy")):
    return {"ref_id": ref_id, "ann_id": ann_id, "image_id": image_id, "split": split, "category_id": 1,
            "file_name": f"COCO_train2014_{image_id:012d}_{ann_id}.jpg", "sent_ids": [0, 1],
            "sentences": [{"sent": s, "raw": s.title(), "tokens": s.split(), "sent_id": i}
                          for i, s in enumerate(sentences)]}


@pytest.fixture
def refer(tmp_path):
    ann = tmp_path / "refcoco"
    (tmp_path / "train2014").mkdir()
    Image.new("RGB", (64, 48), "gray").save(tmp_path / "train2014" / "COCO_train2014_000000000001.jpg")
    instances = {"images": [{"id": 1, "file_name": "COCO_train2014_000000000001.jpg", "width": 64, "height": 48}],
                 "annotations": [{"id": 100, "image_id": 1, "bbox": [10, 8, 20, 16], "category_id": 1},
                                 {"id": 101, "image_id": 1, "bbox": [50, 40, 30, 30], "category_id": 1},
                                 {"id": 102, "image_id": 1, "bbox": [10, 8, -4, 16], "category_id": 1}]}
    refs = [ref(1), ref(2, ann_id=101),  # box outside the 64x48 image
            ref(3, ann_id=102),  # negative width
            ref(4, sentences=("  ",)),  # empty expression
            ref(5, ann_id=999),  # no such annotation
            ref(6, split="testA"), ref(7), ref(8), ref(9)]  # as many good val refs as bad ones
    ann.mkdir()
    (ann / "instances.json").write_text(json.dumps(instances))
    (ann / "refs(unc).p").write_bytes(pickle.dumps(refs))
    return ann, tmp_path / "train2014", refs


def test_a_pickle_is_refused_without_the_flag_and_the_error_says_why(refer, tmp_path):
    ann, images, _ = refer
    with pytest.raises(ValueError, match=r"refusing to unpickle .*refs\(unc\)\.p: loading a pickle runs code .* "
                                         r"--allow-pickle"):
        convert("refcoco-refer", ann, tmp_path / "out", images=str(images))
    assert not (tmp_path / "out").exists()


def test_refs_with_allow_pickle_convert_with_counted_skips(refer, tmp_path):
    ann, images, _ = refer
    rep = convert("refcoco-refer", ann, tmp_path / "out", images=str(images), allow_pickle=True, progress=False)
    s = load_dataset(tmp_path / "out" / "data.jsonl")[0]
    assert rep.rows_read == 8 and rep.n_samples == 4 and rep.options == {"images": str(images), "allow_pickle": True}
    assert s.id == "refcoco-refer-val-1" and s.expression == "man in red" and s.box == (10.0, 8.0, 30.0, 24.0)
    assert s.meta["expressions"] == ["man in red", "left guy"] and s.meta["ann_id"] == 100
    reasons = {r["id"]: r["reason"] for r in map(json.loads, (tmp_path / "out" / "skipped.jsonl").read_text().splitlines())}
    assert "outside the 64x48 image" in reasons["refcoco-refer-val-2"]
    assert "non-positive width" in reasons["refcoco-refer-val-3"]
    assert "empty expression" in reasons["refcoco-refer-val-4"]
    assert reasons["refcoco-refer-val-5"] == "ann_id 999 is not in instances.json"


def test_a_json_copy_of_the_refs_needs_no_flag(refer, tmp_path):
    ann, images, refs = refer
    (ann / "refs(unc).json").write_text(json.dumps(refs))
    rep = convert("refcoco-refer", ann, tmp_path / "out", split="testA", images=str(images), all_expressions=True,
                  progress=False)
    assert rep.n_samples == 2
    assert [s.id for s in load_dataset(tmp_path / "out" / "data.jsonl")] == ["refcoco-refer-testA-6:0",
                                                                            "refcoco-refer-testA-6:1"]


def test_folder_level_problems_are_errors(refer, tmp_path):
    ann, images, refs = refer
    (images / "COCO_train2014_000000000001.jpg").unlink()
    with pytest.raises(FileNotFoundError, match=r"1 COCO image file\(s\) of split 'val' .*000000000001.jpg"):
        convert("refcoco-refer", ann, tmp_path / "out", images=str(images), allow_pickle=True)
    (ann / "refs(umd).json").write_text(json.dumps(refs))
    with pytest.raises(ValueError, match=r"several splitBy .* --refs NAME"):
        convert("refcocog-refer", ann, tmp_path / "out", images=str(images))
    with pytest.raises(ValueError, match="no refs of split 'test'"):
        convert("refcocog-refer", ann, tmp_path / "out", images=str(images), refs="refs(umd).json", split="test")
