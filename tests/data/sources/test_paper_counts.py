"""The paper's sample counts (App. E.2) next to a conversion's, at the end of ``vrh data convert`` and in
``vrh data inspect``, with the reasons they differ (issue 29 item 10). On small files in the sources' real
schemas; the shared real files are in ``test_real_files_convert_inspect.py``."""

import io
import json

import pytest
from PIL import Image

from vrh.cli import main
from vrh.data.sources import convert, get_source, source_names
from vrh.data.sources.paper_counts import PAPER_COUNTS, ConversionFacts, check_count, paper_count

# issue 29 item 10, as the paper's App. E.2 states them
PAPER = {("refcoco", "val"): 8811, ("refcoco+", "val"): 3804, ("refcocog", "val"): 7573,
         ("refspatial", "location"): 100, ("toloka", "test_public"): 1705, ("vaw", "val"): 6309,
         ("spatial457", "validation"): 670, ("spatialrgpt", "val"): 266, ("cvbench", "test"): 2638,
         ("mmstar", "val"): 1500, ("countbenchqa", "test"): 491, ("mathvista", "testmini"): 1000}


def png(w=64, h=48):
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (90, 90, 90)).save(buf, format="PNG")
    return buf.getvalue()


def refcoco_rows(n):
    return [{"question_id": str(i), "image": {"bytes": png(), "path": None}, "question": "caption it",
             "answer": ["man left", "the man"], "bbox": [2, 2, 20, 16], "file_name": f"COCO_{i}.jpg"} for i in range(n)]


@pytest.mark.parametrize("key", sorted(PAPER), ids=lambda k: f"{k[0]}-{k[1]}")
def test_every_count_of_the_issue_is_in_the_table(key):
    assert paper_count(*key).n == PAPER[key]


def test_every_entry_names_a_registered_source_and_split():
    """The table is the paper's (App. E.2): each entry names a source vrh has; a source the paper does not
    evaluate needs no entry (its counts read 'the paper does not evaluate it')."""
    for p in PAPER_COUNTS:
        assert p.source in source_names(), p
        assert p.split is None or p.split in get_source(p.source).splits, p


def test_a_source_without_an_entry_is_one_the_paper_does_not_evaluate():
    c = check_count("no-such-benchmark", "test", 12)
    assert (c.status, c.paper) == ("none", None)
    assert c.line() == "paper count: none for this split (the paper does not evaluate it)"


def test_the_same_count_says_so_and_gives_no_reason():
    c = check_count("cvbench", "test", 2638, ConversionFacts(rows_read=2638, expected_rows=2638))
    assert (c.status, c.why) == ("same", ())
    assert c.line().startswith("paper count 2,638, here 2,638: the same (App. E.2: CV-Bench")


def test_refcoco_plus_says_why_lmms_lab_has_one_row_more():
    c = check_count("refcoco+", "val", 3805, ConversionFacts(rows_read=3805, expected_rows=3805))
    assert c.status == "differs" and c.line().startswith("paper count 3,804, here 3,805: differs by +1 (App. E.2")
    assert c.why == ("lmms-lab's RefCOCO+ val has 3,805 rows, one more than the paper's 3,804; the paper does not "
                     "say which row it left out",)


def test_the_refer_release_says_which_set_the_paper_counted():
    c = check_count("refcoco-refer", "val", 3811)
    assert c.status == "differs" and c.paper.n == 8811
    assert "lmms-lab" in c.line() and "3,811 refs" in c.line() and "`refcoco`" in c.line()


def test_vaw_is_only_close_whatever_the_split():
    for split in get_source("vaw").splits:
        c = check_count("vaw", split, 6309)
        assert c.status == "close" and "hand-built" in c.line(), split


def test_each_thing_a_conversion_did_is_a_reason():
    facts = ConversionFacts(rows_read=1406, expected_rows=1406, n_skipped=3, options={"regions": "draw", "subset": "x"},
                            excluded={"quantitative question": 749})
    why = check_count("spatialrgpt", "val", 654, facts).why
    assert why == ("converted with --subset x", "3 rows skipped, each with its reason in skipped.jsonl",
                   "749 rows outside the converted subset: quantitative question")  # --regions changes no count
    assert check_count("refcoco", "val", 17000, ConversionFacts(options={"all_expressions": True})).why == (
        "one sample per expression (--all-expressions); the paper counts one per object",)
    assert check_count("toloka", "test_public", 50, ConversionFacts(complete=False, limit=50)).why == (
        "the conversion stopped at --limit 50",)
    assert check_count("mmstar", "val", 1, ConversionFacts(rows_read=1, expected_rows=1500)).why == (
        "this snapshot has 1 row where the published split has 1,500",)
    assert check_count("countbenchqa", "test", 490).why == (
        "no known reason: compare the snapshot with the published one",)


def test_spatial457_names_the_config_the_paper_counted():
    other = ConversionFacts(src="/hf/Spatial457-v2/L2_objects")
    for n in (500, 670):  # another config is another set, even with the paper's number of samples
        assert check_count("spatial457", "validation", n, other).why == (
            "the snapshot is config L2_objects; the paper's count is for L1_single",)
    l1 = ConversionFacts(src="/hf/L1_single")
    assert check_count("spatial457", "validation", 670, l1).status == "same"
    assert check_count("spatial457", "validation", 500, l1).why[0].startswith("no known")


def test_a_split_the_paper_does_not_evaluate_names_the_one_it_does():
    c = check_count("cvbench", "test_2d", 1438)
    assert (c.status, c.paper) == ("none", None)
    assert c.line() == "paper count: none for this split (App. E.2 evaluates test: 2,638)"


def test_convert_ends_with_the_paper_count_and_writes_it(tmp_path, write_parquet, capsys):
    write_parquet(tmp_path / "snap" / "data" / "val-00000-of-00001.parquet", refcoco_rows(6))
    out = tmp_path / "out"
    assert main(["data", "convert", "refcoco", str(tmp_path / "snap"), "--out", str(out), "--limit", "4"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("paper count 8,811, here 4: differs by -8,807 (App. E.2: RefCOCO val, lmms-lab/RefCOCO's val rows, "
                    "one per object); why: the conversion stopped at --limit 4")
    summary = json.loads((out / "convert.json").read_text())["paper_count"]
    assert (summary["n"], summary["paper_n"], summary["status"]) == (4, 8811, "differs")


def test_inspect_reads_what_the_conversion_did_from_convert_json(tmp_path, write_parquet, capsys):
    write_parquet(tmp_path / "snap" / "data" / "val-00000-of-00001.parquet", refcoco_rows(3))
    out = tmp_path / "out"
    convert("refcoco", tmp_path / "snap", out, all_expressions=True, progress=False)
    assert main(["data", "inspect", str(out / "data.jsonl"), "--out", str(tmp_path / "look"), "--n-render", "0"]) == 0
    printed = capsys.readouterr().out
    assert ("refcoco val: paper count 8,811, here 6: differs by -8,805 (App. E.2: RefCOCO val, lmms-lab/RefCOCO's val "
            "rows, one per object); why: this snapshot has 3 rows where the published split has 8,811; one sample per "
            "expression (--all-expressions); the paper counts one per object") in printed
    [check] = json.loads((tmp_path / "look" / "inspect.json").read_text())["paper_counts"]
    assert (check["benchmark"], check["split"], check["n"], check["paper_n"]) == ("refcoco", "val", 6, 8811)

    (out / "convert.json").write_text("{not json")  # a damaged summary: compared without it, and said
    assert main(["data", "inspect", str(out / "data.jsonl"), "--out", str(tmp_path / "look2"), "--n-render", "0"]) == 0
    printed = capsys.readouterr().out
    assert "why: no known reason" in printed and "convert.json could not be read" in printed


def test_inspect_checks_each_benchmark_of_a_merged_file(tmp_path, write_parquet, capsys):
    write_parquet(tmp_path / "rc" / "data" / "val-00000-of-00001.parquet", refcoco_rows(2))
    write_parquet(tmp_path / "cb" / "test.parquet", [
        {"image": {"bytes": png(), "path": None}, "question": "How many cats?", "number": 3} for _ in range(2)])
    convert("refcoco", tmp_path / "rc", tmp_path / "a", progress=False)
    convert("countbenchqa", tmp_path / "cb", tmp_path / "b", progress=False)
    merged = tmp_path / "merged.jsonl"
    merged.write_text("".join((tmp_path / d / "data.jsonl").read_text().replace('"images/', f'"{d}/images/')
                              for d in ("a", "b")))
    assert main(["data", "inspect", str(merged), "--out", str(tmp_path / "look"), "--n-render", "0"]) == 0
    printed = capsys.readouterr().out
    assert "refcoco val: paper count 8,811, here 2: differs by -8,809" in printed
    assert "countbenchqa test: paper count 491, here 2: differs by -489" in printed


def test_inspect_says_when_lines_name_no_benchmark(tmp_path, capsys):
    Image.new("RGB", (64, 48)).save(tmp_path / "a.png")
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "q1", "image": "a.png", "task": "vqa", "question": "Red?",
                                                  "answer": "yes"}) + "\n")
    assert main(["data", "inspect", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "look"), "--n-render", "0"]) == 0
    assert "\n1 samples name no benchmark (their `benchmark` field): no paper count to compare\n" in (
        capsys.readouterr().out)
