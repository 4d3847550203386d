"""``vrh demo`` on the shipped organism with small n: the run folder and its sub-runs, rerunning into the
same folder (--overwrite, as every command), refusing a foreign folder, and resuming an interrupted demo."""

import argparse
import json

import pytest

from vrh import runs
from vrh.analyses import demo
from vrh.options import add_options, default_ks, parse_config

SMALL = dict(n_detect=8, n_eval=8, n_vqa=4, batch_size=4)
HEADLINE_KEYS = ("baseline_accuracy", "k", "num_heads_total", "vrh_masked_accuracy", "random_masked_accuracy_mean",
                 "random_masked_accuracy_std", "random_seeds", "vrh_parse_failure_rate",
                 "random_parse_failure_rate_mean", "top_k_heads", "sparsity", "vqa", "k_curve", "n_detect", "n_eval",
                 "subruns", "elapsed_seconds", "report")
SWEEP_KEYS = {"schema_version", "task", "num_heads_total", "k", "baseline_accuracy", "vrh", "random", "conditions",
              "random_control", "elapsed_seconds"}  # what `vrh sweep` writes (tests/commands/test_sweep.py)


@pytest.fixture
def no_report(monkeypatch):
    """The report (matplotlib, ~3 s) is tested once, in the finished demo; later runs only record the call."""
    import vrh.report.build

    calls = []
    monkeypatch.setattr(vrh.report.build, "build_report",
                        lambda dirs, out, k=None, sections=None: calls.append((dirs, out, k)))
    return calls


def comparable(result):
    """A result without what differs between two identical runs (wall time, where the report went)."""
    return {k: v for k, v in result.items() if k not in ("elapsed_seconds", "report")}


@pytest.fixture(scope="module")
def organism():
    from vrh.models.loading import load_model

    return load_model("organism")


@pytest.fixture(scope="module")
def finished(tmp_path_factory, organism):
    out = tmp_path_factory.mktemp("demo") / "demo"
    return out, demo.run(demo.Config(out=str(out), **SMALL), organism)


def test_cli_defaults_are_todays():
    p = argparse.ArgumentParser()
    add_options(p, demo.Config)
    cfg = parse_config(demo.Config, p.parse_args([]))
    assert (cfg.out, cfg.model, cfg.n_detect, cfg.n_eval, cfg.n_vqa, cfg.k, cfg.seeds) == \
        ("runs/demo", "organism", 200, 200, 200, None, (0, 1, 2))
    assert (cfg.batch_size, cfg.max_new_tokens, cfg.mask_mode) == (64, 24, "zero")
    assert parse_config(demo.Config, p.parse_args(["--k", "2", "--mask-mode", "uniform"])).k == 2
    assert default_ks(3, 4, 8) == (0, 1, 3, 6) and default_ks(3, 2, 4) == (0, 1, 3)
    from vrh.scoring.sparsity import DEFAULT_THRESHOLDS

    assert cfg.sparsity_thresholds == DEFAULT_THRESHOLDS  # the paper's, the one definition (issue 26 item 7)


def test_demo_writes_headline_subruns_and_report(finished):
    out, r = finished
    assert runs.read_results(out) == json.loads(json.dumps({**r, "schema_version": runs.SCHEMA_VERSION}))
    for key in HEADLINE_KEYS:
        assert key in r, key
    assert r["k"] == 3 and r["num_heads_total"] == 32 and r["random_seeds"] == [0, 1, 2]
    assert r["n_detect"] == 8 and r["n_eval"] == 8 and r["k_curve"]["k"] == [0, 1, 3, 6]
    for key in ("baseline_accuracy", "vrh_masked_accuracy", "random_masked_accuracy_mean"):
        assert 0.0 <= r[key] <= 1.0
    assert runs.read_config(out)["command"] == "demo"
    det = runs.read_head_scores(out / "detect")
    assert r["top_k_heads"] == [list(h) for h in det.ranking()[:3]]
    for sub, task in (("sweep_grounding", "grounding"), ("sweep_vqa", "vqa")):
        res = runs.read_results(out / sub)
        assert set(res) == SWEEP_KEYS and res["task"] == task
        cfg = runs.read_config(out / sub)
        assert cfg["command"] == "sweep" and cfg["config"]["heads"] == str(out / "detect")
        lines = runs.read_samples(out / sub)
        assert len({(l["condition"], l["id"]) for l in lines}) == len(lines) > 0
    g = runs.read_results(out / "sweep_grounding")
    assert g["k"] == [0, 1, 3, 6] and r["vrh_masked_accuracy"] == g["vrh"]["accuracy"][2]
    assert runs.read_results(out / "sweep_vqa")["k"] == [0, 3]
    vqa_random = runs.read_results(out / "sweep_vqa")["random"]  # the VQA row's spread, as grounding's (issue 46 item 9)
    assert r["vqa"]["random_masked_accuracy_std"] == vqa_random["std"][1] is not None
    assert (out / "report" / "report.html").exists() and r["report"] == str(out / "report" / "report.html")
    # sparsity at the paper's Fig. 5 thresholds, as every other output states it (issue 26 item 7)
    assert sorted(float(t) for t in r["sparsity"]["fraction_above"]) == [0.001, 0.005]


def test_the_printed_headline_gives_both_random_rows_their_spread_in_percent(finished, capsys, monkeypatch):
    from vrh.analyses.demo.analysis import print_summary

    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    out, r = finished
    capsys.readouterr()
    print_summary(runs.results_from_json("demo", runs.read_results(out)))
    text = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") >= 3}
    vqa, grounding = rows["VQA, 3 random heads masked"], rows["grounding, 3 random heads masked"]
    assert f"{100 * r['vqa']['random_masked_accuracy_mean']:.1f} ± " in vqa and "%" in vqa
    assert f"{100 * r['random_masked_accuracy_mean']:.1f} ± " in grounding


def test_a_plain_rerun_is_refused_like_every_command(finished, organism, capsys):
    out, r = finished
    with pytest.raises(FileExistsError, match="is not empty; pass --overwrite"):
        demo.run(demo.Config(out=str(out), **SMALL), organism)
    assert "replaced" not in capsys.readouterr().err and runs.is_finished(out) and runs.is_finished(out / "detect")


def test_the_readme_one_liner_runs_twice():
    """The README's demo command carries --overwrite: the same line works again on its own folder."""
    from pathlib import Path

    line = next(l for l in (Path(__file__).parents[2] / "README.md").read_text().splitlines()
                if l.startswith("pip install") and "vrh demo --out" in l)  # the set-up block's command, not prose
    args = line.split("vrh demo", 1)[1].split("#")[0].split()
    p = argparse.ArgumentParser()
    add_options(p, demo.Config)
    assert parse_config(demo.Config, p.parse_args(args)).overwrite


@pytest.mark.parametrize("inner, named", [("data/MY_NOTES.txt", "data/MY_NOTES.txt"),
                                          ("data/my_extra/labels.csv", "data/my_extra/"),
                                          ("report/my_slides.txt", "report/my_slides.txt"),
                                          ("report/figures/mine.png", "report/figures/mine.png")])
@pytest.mark.parametrize("flag", ["overwrite", "resume"])
def test_the_users_files_inside_the_demos_subfolders_are_never_deleted(finished, organism, inner, named, flag):
    """Issue 33 item 3: ``data/`` and ``report/`` were removed whole, without looking inside."""
    out, _ = finished
    mine = out / inner
    made = not mine.parent.exists()
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text("mine")
    try:
        with pytest.raises(FileExistsError, match=f"--{flag}: .*holds files no vrh run writes \\({named}\\)"):
            demo.run(demo.Config(out=str(out), **{flag: True}, **SMALL), organism)
        assert mine.read_text() == "mine" and runs.is_finished(out) and (out / "report" / "report.html").is_file()
    finally:
        mine.unlink()
        if made:
            mine.parent.rmdir()


def test_rerun_with_overwrite_replaces_a_previous_demo_run(finished, organism, no_report):
    out, r = finished
    stale = out / "sweep_grounding" / runs.OVERLAYS  # an artefact an older run of another command left there
    stale.write_text("from an older run")
    again = demo.run(demo.Config(out=str(out), overwrite=True, **SMALL), organism)  # the README's one-liner, twice
    assert comparable(again) == comparable(r) and not stale.exists()
    assert no_report == [([out, out / "detect", out / "sweep_grounding", out / "sweep_vqa"], out / "report", 3)]


def test_a_rerun_never_deletes_what_no_run_wrote(finished, organism):
    out, _ = finished
    mine = out / "sweep_vqa" / "my_notes.txt"
    mine.write_text("mine")
    with pytest.raises(FileExistsError, match="holds files no vrh run writes \\(my_notes.txt\\)"):
        demo.run(demo.Config(out=str(out), overwrite=True, **SMALL), organism)
    assert mine.read_text() == "mine" and runs.is_finished(out)
    mine.unlink()


def test_a_foreign_non_empty_folder_is_refused(tmp_path, organism):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="--overwrite"):
        demo.run(demo.Config(out=str(tmp_path), **SMALL), organism)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_interrupted_demo_resumes(tmp_path, monkeypatch, crash_after, finished, organism, no_report):
    import vrh.experiments.detection

    out = tmp_path / "demo"

    restore = crash_after(5)
    with pytest.raises(KeyboardInterrupt):
        demo.run(demo.Config(out=str(out), **SMALL), organism)
    restore()
    partial = runs.read_samples(out / "sweep_grounding")
    assert 0 < len(partial) < 13 * 8 and not runs.is_finished(out / "sweep_grounding") and not runs.is_finished(out)
    detected = (out / "detect" / runs.HEAD_SCORES).read_text()

    def no_detection(*args, **kwargs):
        raise AssertionError("the finished detection should be reused")

    monkeypatch.setattr(vrh.experiments.detection, "detect_heads", no_detection)
    again = demo.run(demo.Config(out=str(out), resume=True, **SMALL), organism)
    assert (out / "detect" / runs.HEAD_SCORES).read_text() == detected
    lines = runs.read_samples(out / "sweep_grounding")
    assert lines[:len(partial)] == partial  # nothing finished was redone
    assert len({(l["condition"], l["id"]) for l in lines}) == len(lines) == 13 * 8
    assert comparable(again) == comparable(finished[1])


def test_a_k_without_room_is_refused_before_the_previous_run_is_touched(finished, organism):
    out, _ = finished
    with pytest.raises(ValueError, match="--k 20: no room"):  # 20 top heads leave 12 of 32
        demo.run(demo.Config(out=str(out), k=20, overwrite=True, **SMALL), organism)
    with pytest.raises(ValueError, match=r"--ks 40 is outside \[0, 32\]"):
        demo.run(demo.Config(out=str(out), ks=(0, 40), overwrite=True, **SMALL), organism)
    assert runs.is_finished(out) and runs.is_finished(out / "sweep_vqa")


def test_the_demo_prints_no_note_about_its_own_second_dataset(tmp_path, organism, no_report, capsys):
    demo.run(demo.Config(out=str(tmp_path / "d"), **SMALL), organism)
    err = capsys.readouterr().err
    assert "is not the dataset" not in err
    res = runs.read_config(tmp_path / "d" / "sweep_vqa")["data"]
    assert "disjointness checked by sample id only" in res["disjointness"]  # still recorded in the run
