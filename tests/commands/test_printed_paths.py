"""Every command prints the paths the user typed as typed (issue 33 item 9).

``--out "runs/rep[/x]"`` wrote the report, then crashed with rich's ``MarkupError`` (a closing tag that closes
nothing); ``--out runs/exp[v2]`` printed ``runs/exp/report.html``, the wrong path, silently (``[v2]`` taken for a
style). Here each command runs through the CLI with folders named like rich markup and must succeed and print
them whole. dpo-pairs' next commands are a script: pasted, each folder must stay one argument.
"""

import shlex

import pytest

from vrh import runs
from vrh.cli import main

FAST = ["--max-new-tokens", "4", "--batch-size", "4"]


def _ok(argv, capsys) -> str:
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 0, (argv[0], cap.err)
    return cap.out + cap.err


def test_model_commands_print_their_folders_as_typed(tmp_path, tiny_checkpoint, tiny_dataset, capsys, monkeypatch):
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    model = tmp_path / "ck[v2]"  # the model path is printed too ("model: ...")
    model.symlink_to(tiny_checkpoint)
    base = ["--model", str(model), *FAST]
    det = tmp_path / "det[v2]"
    printed = _ok(["detect", *base, "--data", tiny_dataset, "--n", "6", "--scorers", "out/sum/mean,rand1/sum/mean",
                   "--out", str(det)], capsys)
    assert f"-> {det}\n" in printed and f"model: {model} " in printed
    cases = {
        "evaluate": ["--data", tiny_dataset, "--mask-heads", str(det), "--k", "1", "--n", "2"],
        "sweep": ["--data", tiny_dataset, "--heads", str(det), "--ks", "0,1", "--seeds", "0", "--n", "2"],
        "compare": ["--data", tiny_dataset, "--n", "4", "--n-eval", "2", "--ks", "1", "--seeds", "0,1,2",
                    "--methods", "qrhead"],
        "transfer": ["--data", tiny_dataset, "--heads", str(det), "--k", "1", "--seeds", "0", "--n", "2"],
        "stability": ["--heads", str(det), "--k", "1", "--n-values", "2", "--bootstrap", "2", "--n-eval", "2",
                      "--accuracy-draws", "1"],
    }
    for i, (command, argv) in enumerate(cases.items()):
        out = tmp_path / ("rep[/x]", "exp[v2]", "[bold]b", "x:thumbs_up:", "a\\[b]")[i] / command
        printed = _ok([command, *base, *argv, "--out", str(out)], capsys)
        assert f"-> {out}" in printed, (command, printed)


def test_dpo_pairs_next_commands_keep_each_folder_one_argument(tmp_path, det_run, tiny_checkpoint, capsys,
                                                                monkeypatch):
    """A ``<b>`` in --out became a redirection when the printed commands were pasted (issue 33 item 10)."""
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    out = tmp_path / "pairs [/x] <b>; $(x)"
    printed = _ok(["dpo-pairs", "--model", tiny_checkpoint, *FAST, "--heads", str(det_run), "--k", "1", "--n", "3",
                   "--out", str(out)], capsys)
    comment, script = printed.split("\n", 1)[0], [ln for ln in printed.splitlines() if ln.startswith("vrh ")]
    assert shlex.split(comment)[-1] == f"{out}/{runs.PAIRS}"
    train, evaluate = (shlex.split(ln) for ln in script)
    assert train[train.index("--pairs") + 1] == str(out) and train[train.index("--out") + 1] == f"{out}-dpo"
    assert evaluate[evaluate.index("--model") + 1] == f"{out}-dpo/model"
    assert evaluate[evaluate.index("--mask-heads") + 1] == str(det_run)
    assert runs.read_results(out)["training_command"] == "\n".join(script)


def test_report_and_data_inspect_print_their_folders_as_typed(tmp_path, det_run, tiny_dataset, capsys, monkeypatch):
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    rep = tmp_path / "rep[/x]"
    printed = _ok(["report", str(det_run), "--out", str(rep)], capsys)
    assert printed.startswith(f"report: {rep}/report.html (self-contained), {rep}/report.md + {rep}/figures/")
    inspected = tmp_path / "exp[v2]"
    assert f"-> {inspected}\n" in _ok(["data", "inspect", tiny_dataset, "--out", str(inspected), "--n-render", "1"],
                                     capsys)


@pytest.mark.slow
def test_demo_prints_its_folder_as_typed(tmp_path, tiny_checkpoint, capsys, monkeypatch):
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    out = tmp_path / "demo[/x]"
    printed = _ok(["demo", "--model", tiny_checkpoint, *FAST, "--n-detect", "4", "--n-eval", "2", "--n-vqa", "2",
                   "--k", "1", "--ks", "0,1", "--seeds", "0,1,2", "--out", str(out)], capsys)
    assert f"writing {out}\n" in printed and f"report: {out}/report/report.html" in printed
