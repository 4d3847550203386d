"""Held-out selection (paper App. H): which samples an evaluation may use after a detection run."""

import json

import pytest

from vrh import runs
from vrh.data import dataset_hash
from vrh.experiments.heldout import select_eval_samples


def _det_run(path, data, detect_ids, eval_ids, sha=None):
    with runs.RunFolder(path) as run:
        run.write_config({"command": "detect", "data": {"path": str(data), "sha256": sha or dataset_hash(data),
                                                        "task": "grounding"},
                          "detect_ids": detect_ids, "eval_ids": eval_ids})
    return path


def test_same_dataset_same_task_uses_the_held_out_split(tmp_path, tiny_dataset):
    run = _det_run(tmp_path / "det", tiny_dataset, ["g0", "g1"], ["g5", "g3"])
    samples, info = select_eval_samples(tiny_dataset, "grounding", None, [run])
    assert [s.id for s in samples] == ["g3", "g5"] and "held-out split" in info["disjointness"]


def test_vqa_on_the_detection_dataset_drops_only_scored_ids(tmp_path, tiny_dataset):
    """The trap: held-out grounding ids used to filter VQA samples away ("no vqa samples")."""
    run = _det_run(tmp_path / "det", tiny_dataset, ["g0", "q1"], ["g5"])
    samples, _ = select_eval_samples(tiny_dataset, "vqa", None, [run])
    assert len(samples) == 11 and "q1" not in {s.id for s in samples}


def test_other_dataset_is_recorded_and_overlapping_ids_are_an_error(tmp_path, tiny_dataset):
    run = _det_run(tmp_path / "det", "other.jsonl", ["g0", "g1"], ["g2"], sha="0" * 64)
    with pytest.raises(ValueError, match="--no-disjoint"):
        select_eval_samples(tiny_dataset, "grounding", None, [run])
    samples, info = select_eval_samples(tiny_dataset, "grounding", None, [run], disjoint=False)
    assert len(samples) == 12 and info["disjointness"] == "off (--no-disjoint)"
    run2 = _det_run(tmp_path / "det2", "other.jsonl", ["zz"], ["g2"], sha="0" * 64)
    samples, info = select_eval_samples(tiny_dataset, "grounding", None, [run2])
    assert len(samples) == 12 and "by sample id only" in info["disjointness"]


def test_n_larger_than_the_set_names_the_option(tmp_path, tiny_dataset):
    run = _det_run(tmp_path / "det", tiny_dataset, ["g0"], ["g1", "g2"])
    with pytest.raises(ValueError, match=r"--n 5 .* 2 grounding samples"):
        select_eval_samples(tiny_dataset, "grounding", 5, [run])
    with pytest.raises(ValueError, match="no vqa samples|has no"):
        bad = tmp_path / "g.jsonl"
        bad.write_text("".join(line for line in open(tiny_dataset) if json.loads(line)["task"] == "grounding"))
        for i in range(12):
            (tmp_path / f"im{i}.png").write_bytes((__import__("pathlib").Path(tiny_dataset).parent / f"im{i}.png").read_bytes())
        select_eval_samples(bad, "vqa", None)


def _counting_parser(monkeypatch) -> list[str]:
    """The ids of the dataset lines parsed from now on (each line read is parsed once)."""
    import vrh.data.jsonl as jl

    seen, real = [], jl._parse_line
    monkeypatch.setattr(jl, "_parse_line", lambda rec, *a: seen.append(rec.get("id")) or real(rec, *a))
    return seen


def test_n_samples_stop_the_reading_at_the_nth_and_the_rest_of_the_file_is_never_parsed(tmp_path, tiny_dataset,
                                                                                       monkeypatch):
    """Issue 45 item 15: `--n 3` on a 300 MB JSONL parsed (and opened the image of) every line."""
    seen = _counting_parser(monkeypatch)
    samples, info = select_eval_samples(tiny_dataset, "grounding", 3)
    assert [s.id for s in samples] == ["g0", "g1", "g2"] and info["sha256"] == dataset_hash(tiny_dataset)
    assert seen == ["g0", "q0", "g1", "q1", "g2"]  # the lines up to the third grounding sample, none after
    seen.clear()
    run = _det_run(tmp_path / "det", tiny_dataset, ["g0", "g1"], ["g7", "g3", "g5"])
    samples, _ = select_eval_samples(tiny_dataset, "grounding", 2, [run])  # the held-out split, in file order
    assert [s.id for s in samples] == ["g3", "g5"] and seen[-1] == "g5" and len(seen) == 11
    seen.clear()
    assert [s.id for s in select_eval_samples(tiny_dataset, "vqa", 2, [run])[0]] == ["q0", "q1"] and len(seen) == 4


def test_a_broken_line_past_the_selection_is_not_read_and_too_large_an_n_reads_the_whole_file(tmp_path, tiny_dataset):
    import shutil
    from pathlib import Path

    from vrh.data import DatasetError

    data = tmp_path / "d.jsonl"
    data.write_text(Path(tiny_dataset).read_text() + "not json\n")
    for im in Path(tiny_dataset).parent.glob("*.png"):
        shutil.copy(im, tmp_path / im.name)
    assert len(select_eval_samples(data, "grounding", 3)[0]) == 3
    with pytest.raises(DatasetError, match=r"d.jsonl:25: invalid JSON"):
        select_eval_samples(data, "grounding", 20)  # more than there are: every line is read, and checked
    with pytest.raises(ValueError, match=r"--n 13 asks for more samples than there are: 12 grounding"):
        select_eval_samples(tiny_dataset, "grounding", 13)
