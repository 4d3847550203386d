"""The report of a real (small) ``vrh demo`` run and of a ``dpo-pairs`` run on its detection (issue 26):
every number the headline states is one of results.json's, the demo folder alone reports its sub-runs, the
headline finding comes first, and DPO pairs get their own section. And what the report reads: every
results.json these runs (and small evaluate / transfer / stability runs on the same detection) wrote holds
the types :mod:`vrh.runs.results` annotates (issue 34 item 4).

The demo runs once per module on the shipped organism with small n (~10 s on two cores).
"""

import re

import pytest

from tests.support.results_types import mismatches
from vrh import runs
from vrh.analyses.reporting import build_report
from vrh.analyses.reporting import build_sections
from vrh.report.document import Section, Table, Text, figures
from vrh.report.load import load_runs

SMALL = dict(n_detect=8, n_eval=8, n_vqa=4, batch_size=4)  # as tests/commands/test_demo.py


@pytest.fixture(scope="module")
def organism():
    from vrh.models.loading import load_model

    return load_model("organism")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, organism):
    from vrh.analyses import demo

    out = tmp_path_factory.mktemp("demo") / "demo"
    demo.run(demo.Config(out=str(out), **SMALL), organism)
    return out


@pytest.fixture(scope="module")
def dpo_pairs_run(tmp_path_factory, demo_run, organism):
    from vrh.analyses import dpo_pairs

    out = tmp_path_factory.mktemp("dpo") / "dpo"
    dpo_pairs.run(dpo_pairs.Config(model="organism", heads=str(demo_run / "detect"), k=3, n=6, out=str(out),
                                   batch_size=4, max_new_tokens=24), organism)
    return out


@pytest.fixture(scope="module")
def command_runs(tmp_path_factory, demo_run, organism):
    """evaluate (random heads outside the detected top-k), transfer (with B's own heads) and stability (with
    accuracy draws) on the demo's detection, each on 2 held-out samples (~5 s on two cores)."""
    from vrh.analyses import evaluate, stability, transfer

    root, det = tmp_path_factory.mktemp("commands"), str(demo_run / "detect")
    data = str(demo_run / "data" / "grounding.jsonl")
    fast = dict(batch_size=4, max_new_tokens=24)
    evaluate.run(evaluate.Config(model="organism", data=data, mask_heads=det, k=2, random=True, n=2,
                                 out=str(root / "evaluate"), **fast), organism)
    transfer.run(transfer.Config(model="organism", data=data, heads=det, heads_b=det, k=2, n=2, seeds=(0, 1),
                                 out=str(root / "transfer"), **fast), organism)
    stability.run(stability.Config(model="organism", heads=det, k=2, n_values=(2, 8), bootstrap=2, accuracy_draws=1,
                                   n_eval=2, out=str(root / "stability"), **fast), organism)
    return [root / "evaluate", root / "transfer", root / "stability"]


def _typed(folder):
    """``folder``'s results.json as its kind (:func:`vrh.runs.results_from_json`)."""
    return runs.results_from_json(runs.read_config(folder)["command"], runs.read_results(folder))


def test_every_results_json_written_holds_the_annotated_types(demo_run, dpo_pairs_run, command_runs):
    from vrh.analyses.demo.analysis import SUBRUNS

    kinds = set()
    for folder in [demo_run, *(demo_run / s for s in SUBRUNS), dpo_pairs_run, *command_runs]:
        value = _typed(folder)
        assert type(value) is not runs.RunResults and value.extra == {}, folder  # every key written is known
        assert mismatches(value) == [], folder
        kinds.add(value.COMMAND)
    assert kinds == {"demo", "detect", "sweep", "dpo-pairs", "evaluate", "transfer", "stability"}


@pytest.mark.slow
def test_the_results_json_of_dpo_and_compare_hold_the_annotated_types(tmp_path, demo_run, organism):
    """The kinds the fast test leaves out: ``vrh dpo`` (its pairs with random negatives, two trainings and the
    evaluations of its three models), ``vrh compare`` and ``vrh stability``'s token-choice comparison on
    compare's detection (~10-20 s on two cores)."""
    pytest.importorskip("trl")
    from vrh.analyses import compare, dpo, stability

    fast = dict(batch_size=4, max_new_tokens=24)
    dpo.run(dpo.Config(model="organism", heads=str(demo_run / "detect"), k=2, n=4, n_eval=2, lr=1e-3, max_steps=1,
                       train_batch_size=2, grad_accum=1, out=str(tmp_path / "dpo"), **fast), organism)
    compare.run(compare.Config(model="organism", data=str(demo_run / "data" / "grounding.jsonl"), n=4, n_eval=2,
                               ks=(1,), methods=("out/sum/mean", "rand1/sum/mean"), out=str(tmp_path / "cmp"),
                               **fast), organism)
    stability.run(stability.Config(model="organism", heads=str(tmp_path / "cmp" / "detect"), k=2, n_values=(2, 4),
                                   bootstrap=2, n_eval=2, out=str(tmp_path / "stab"), **fast), organism)
    kinds = set()
    for folder in [p.parent for p in sorted(tmp_path.rglob(runs.RESULTS))]:
        value = _typed(folder)
        assert type(value) is not runs.RunResults and value.extra == {}, folder
        assert mismatches(value) == [], folder
        kinds.add(value.COMMAND)
    assert runs.read_results(tmp_path / "stab")["token_choice"] is not None
    assert kinds == {"dpo", "dpo-pairs", "dpo-train", "evaluate", "compare", "detect", "stability"}


def _texts(blocks):
    """Every sentence of ``blocks``: paragraphs, table captions and each table row joined (sections nest)."""
    out = []
    for b in blocks:
        if isinstance(b, Text):
            out.append(b.text)
        elif isinstance(b, Table):
            out += [b.caption] + [" | ".join(map(str, r)) for r in b.rows]
        elif isinstance(b, Section):
            out += _texts(b.blocks)
    return [t for t in out if t]


def _stated(value, out: set[str]) -> None:
    """Every way the report may print a number of results.json: as is, as a percentage, ``:g``."""
    if isinstance(value, dict):
        for k, v in value.items():
            _stated(k, out)
            _stated(v, out)
    elif isinstance(value, list):
        for v in value:
            _stated(v, out)
    elif isinstance(value, str):
        try:
            _stated(float(value), out)  # sparsity thresholds are keys: "0.05"
        except ValueError:
            pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out |= {str(value), f"{value:g}", f"{100 * value:.1f}", f"{100 * value:.0f}"}
        if float(value).is_integer():
            out.add(str(int(value)))


def test_every_number_of_the_demo_headline_is_in_results_json(demo_run):
    res = runs.read_results(demo_run)
    loaded = load_runs([demo_run])
    headline = next(s for s in build_sections(loaded, None) if s.title == "Headline (vrh demo)")
    sentences = _texts(headline.blocks)
    allowed: set[str] = set()
    _stated(res, allowed)
    for sentence in sentences:
        for number in re.findall(r"\d+(?:\.\d+)?", sentence):
            assert number in allowed, f"{number!r} in {sentence!r} is no number of results.json"
    thresholds = sorted(float(t) for t in res["sparsity"]["fraction_above"])
    table = next(b for b in headline.blocks if isinstance(b, Table) and "sparsity" in b.columns[0])
    assert [float(r[0]) for r in table.rows] == thresholds  # what the demo recorded (by default the paper's 0.001 / 0.005)
    assert [r[2] for r in table.rows] == [str(res["sparsity"]["count_above"][f"{t:g}"]) for t in thresholds]
    assert "recorded by demo" in table.caption


def test_the_demo_vqa_random_row_has_its_spread_like_grounding(demo_run):
    """The VQA "k random heads" row lacked the ± the grounding row has (issue 46 item 9)."""
    res = runs.read_results(demo_run)
    headline = next(s for s in build_sections(load_runs([demo_run]), None) if s.title == "Headline (vrh demo)")
    table = next(b for b in headline.blocks if isinstance(b, Table) and b.columns[0] == "condition")
    rows = {r[0]: r for r in table.rows}
    vqa = res["vqa"]
    assert rows["VQA, 3 random heads masked"][1] == (f"{100 * vqa['random_masked_accuracy_mean']:.1f} ± "
                                                     f"{100 * vqa['random_masked_accuracy_std']:.1f}")
    assert rows["VQA, 3 random heads masked"][2] == rows["grounding, 3 random heads masked"][2]


def test_the_demo_random_control_counts_the_sets_of_each_task(demo_run):
    res = runs.read_results(demo_run)
    headline = next(s for s in build_sections(load_runs([demo_run]), None) if s.title == "Headline (vrh demo)")
    control = next(t for t in _texts(headline.blocks) if "random control used" in t)
    assert "no random head sets" not in control
    for task, rc in res["random_control"].items():  # the demo nests the control by task
        for e in rc["per_k"]:
            assert (f"{task} k={e['k']}: {e['n_distinct_sets']} distinct random head set(s) from "
                    f"{len(e['seeds_drawn'])} seed(s), {e['n_eligible_heads']} eligible heads") in control


def test_the_demo_folder_alone_reports_its_sub_runs(demo_run, tmp_path):
    from vrh.analyses.demo.analysis import SUBRUNS

    alone = load_runs([demo_run])
    assert [r.name for r in alone] == ["demo", *SUBRUNS]
    assert all(r.part_of == "demo" for r in alone[1:]) and alone[0].part_of is None
    names = [f.name for f in figures(build_sections(alone, None))]
    assert "detect-heatmap" in names and "sweep_grounding-kcurve" in names and "sweep_vqa-kcurve" in names
    assert any(n.startswith("detect-overlay-") for n in names)
    # the sub-runs also given (as vrh demo itself does): each is still reported once
    both = load_runs([demo_run, *(demo_run / s for s in SUBRUNS)])
    assert [r.name for r in both] == [r.name for r in alone]
    paths = build_report([demo_run], tmp_path / "out")
    pngs = sorted(p.name for p in paths["figures"].glob("*.png"))
    assert "sweep_grounding-kcurve.png" in pngs and any(p.startswith("detect-overlay-") for p in pngs)
    assert "was given" not in paths["md"].read_text()  # no "given twice" note for sub-runs


def test_the_headline_finding_is_the_first_thing_after_the_title(demo_run, tmp_path):
    res = runs.read_results(demo_run)
    k = res["k"]
    pct = lambda key: f"{100 * res[key]:.1f}%"  # noqa: E731
    expected = (f"demo (grounding): top-{k} VRHs masked → {pct('vrh_masked_accuracy')} vs {k} random heads "
                f"{pct('random_masked_accuracy_mean')} (unmasked {pct('baseline_accuracy')})")
    paths = build_report([demo_run, demo_run / "detect"], tmp_path / "out")
    html = paths["html"].read_text()
    first = re.search(r"</h1>\s*<p>([^<]*)</p>", html)
    assert first and first.group(1).startswith(expected), html[:600]
    md = paths["md"].read_text().split("\n\n")
    assert md[1].startswith(expected)
    assert "was given" not in html  # a sub-run also given is no folder given twice


def test_dpo_pairs_runs_render_counts_drop_reasons_and_examples(dpo_pairs_run, tmp_path):
    from vrh.report.sections import summary_row

    out = dpo_pairs_run
    res = runs.read_results(out)
    html = build_report([out], tmp_path / "report")["html"].read_text()
    assert "no renderer" not in html and ">DPO preference pairs</h2>" in html
    loaded = load_runs([out])
    sec = next(s for s in build_sections(loaded, None) if s.title == "DPO preference pairs")
    tables = [b for b in _blocks(sec) if isinstance(b, Table)]
    counts = {r[0]: r[1] for r in tables[0].rows}
    assert counts["samples"] == str(res["n_samples"]) and counts["pairs kept"] == str(res["n_pairs"])
    assert counts["pairs dropped"] == str(res["n_dropped"])
    for reason, n in res["dropped"].items():
        assert counts[f"dropped: {reason}"] == str(n)
    assert counts["chosen accuracy (%)"] == f"{100 * res['chosen_accuracy']:.1f}"
    examples = next(t for t in tables if t.columns[0] == "sample")
    expressions = {r["id"]: r["expression"] for r in runs.read_samples(out) if r["condition"] == "none"}
    decisions = {d["id"]: d for d in res["decisions"]}
    assert 0 < len(examples.rows) <= 5
    for row in examples.rows:
        d = decisions[row[0]]
        assert row[1] == expressions[d["id"]] and d["chosen_text"].strip() in row[2]
        assert d["rejected_text"].strip() in row[3]
        assert row[4] == ("kept" if d["kept"] else f"dropped: {d['drop_reason']}")
    if res["n_pairs"] and res["n_dropped"]:  # kept and dropped examples both shown
        assert {r[4] == "kept" for r in examples.rows} == {True, False}
    row = summary_row(loaded[0])
    assert row[5] == str(res["n_samples"]) and f"{res['n_pairs']} pairs kept of {res['n_samples']} samples" in row[7]


def _blocks(section):
    for b in section.blocks:
        yield from (_blocks(b) if isinstance(b, Section) else [b])
