"""An organism's emergence logs travel with its exported checkpoint (its recipe's phases, in order) and
become a report-ready run folder through ``vrh organism emergence`` (issue 17 item 2), on the tiny build."""

from vrh import runs
from vrh.cli import main
from vrh_lab.organism.emergence import read
from vrh_lab.organism.pipeline import C_RECIPES, build


def test_c1_export_carries_its_phases_logs_and_they_make_a_reported_run(tmp_path):
    out, exp = tmp_path / "build", tmp_path / "ckpts"
    build(out, exp, stages=("vision_a",), tiny=True, eval_n=4)
    build(out, exp, stages=C_RECIPES["C1"], tiny=True, eval_n=4, tower_a=out / "vision_a" / "tower.pt", workers=0)
    ckpt = exp / "organism_c"
    carried = runs.read_emergence(ckpt)
    phases = [read(out / p / runs.EMERGENCE) for p in C_RECIPES["C1"]]
    assert carried == [r for recs in phases for r in recs]  # lm_c_text, lm_c, lm_c_long in order
    assert [(r["phase"], r["step"]) for r in carried] == [("lm_c_text", 0), ("lm_c_text", 2), ("lm_c_text", 4),
                                                          ("lm_c", 0), ("lm_c", 2), ("lm_c_long", 4)]

    run, rep = tmp_path / "emergence", tmp_path / "report"
    assert main(["organism", "emergence", str(ckpt), "--out", str(run)]) == 0
    assert runs.read_emergence(run) == carried and runs.read_config(run)["command"] == "emergence"
    res = runs.read_results(run)
    assert [(p["phase"], p["first_step"], p["last_step"]) for p in res["phases"]] == [
        ("lm_c_text", 0, 4), ("lm_c", 0, 2), ("lm_c_long", 4, 4)]
    last = carried[-1]["image"]
    assert res["final"]["top_k_heads"] == last["top"] and res["final"]["acc_top"] == last["acc_top"]
    assert main(["report", str(run), "--out", str(rep)]) == 0
    md = (rep / "report.md").read_text()
    assert "## Emergence during training" in md and "| lm_c_long | 4 | image |" in md
    assert (rep / "figures" / "emergence-emergence-maps-image.png").is_file()


def test_c3_export_replaces_the_log_of_an_earlier_recipe(tmp_path):
    out, exp = tmp_path / "build", tmp_path / "ckpts"
    build(out, exp, stages=("vision_a",), tiny=True, eval_n=4)
    (exp / "organism_c").mkdir(parents=True)
    runs.write_emergence(exp / "organism_c", [{"step": 9, "phase": "lm_c_long", "k": 1, "n": 4}])  # C1's, say
    build(out, exp, stages=C_RECIPES["C3"], tiny=True, eval_n=4, tower_a=out / "vision_a" / "tower.pt", workers=0)
    carried = runs.read_emergence(exp / "organism_c")
    assert carried == read(out / "lm_c3" / runs.EMERGENCE) and {r["phase"] for r in carried} == {"lm_c3"}
