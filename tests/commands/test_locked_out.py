"""A run folder another vrh process is writing is refused before the model loads, by every command that
loads one (issue 37 item 10: the lock was taken, and so checked, only after minutes of loading a 7B)."""

import subprocess
import sys

import pytest

from vrh import runs
from vrh.cli import build_parser, main

_HOLD = """
import sys, time
from vrh import runs
run = runs.RunFolder(sys.argv[1], resume=True)
print("locked", flush=True)
time.sleep(120)
"""


def _commands_with_a_model_and_an_out() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return [name for name, p in sub.choices.items()
            if {"--model", "--out"} <= {o for a in p._actions for o in a.option_strings}]


def _pairs(folder, tiny_dataset) -> str:
    from vrh.data import load_dataset
    from vrh.experiments import preference_pairs as pp

    s = next(s for s in load_dataset(tiny_dataset) if s.task == "grounding")
    folder.mkdir(exist_ok=True)
    pp.write_pairs(folder / runs.PAIRS, [pp.chat_pair(s, "Where?", "[1, 2, 3, 4]", "[0, 0, 1, 1]")] * 2)
    return str(folder)


def _argv(command: str, det_run, tiny_dataset, tmp_path) -> list[str]:
    """Each command's least arguments that pass its checks before the model loads: its registration's
    ``example_argv`` (vrh.analyses.registry), with {data}, {heads} and {pairs} filled."""
    from vrh.analyses.registry import analyses

    argv = list(analyses()[command].example_argv) if command in analyses() else []
    fill = {"{data}": lambda: tiny_dataset, "{heads}": lambda: str(det_run),
            "{pairs}": lambda: _pairs(tmp_path / "pairs", tiny_dataset)}
    return [fill[a]() if a in fill else a for a in argv]


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    """A finished run folder that another process holds (its pid)."""
    d = tmp_path_factory.mktemp("held") / "run"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "evaluate"})
        run.write_results({"accuracy": 0.5})
    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(d)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    yield d, p.pid
    p.kill()
    p.wait()


@pytest.mark.parametrize("flag", [None, "--resume", "--overwrite"])
@pytest.mark.parametrize("command", _commands_with_a_model_and_an_out())
def test_a_held_run_folder_is_refused_before_the_model_loads(command, flag, held, det_run, tiny_checkpoint,
                                                             tiny_dataset, tmp_path, capsys, monkeypatch):
    import vrh.models.loading

    if command.startswith("dpo"):
        pytest.importorskip("trl")
    folder, pid = held

    def no_loading(*a, **kw):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(vrh.models.loading, "load_model", no_loading)
    argv = [command, "--model", tiny_checkpoint, *_argv(command, det_run, tiny_dataset, tmp_path), "--out", str(folder)]
    assert main(argv + ([flag] if flag else [])) == 2
    err = capsys.readouterr().err
    assert err == f"vrh {command}: error: run folder {folder} is in use by another vrh process (pid {pid}); wait " \
                  "for it to finish or stop it, or choose another --out\n", err
    assert runs.read_results(folder)["accuracy"] == 0.5  # untouched


def test_asking_takes_no_lock_and_this_process_own_lock_is_no_refusal(tmp_path):
    from vrh.runs.folder import check_out

    d = tmp_path / "r"
    with runs.RunFolder(d) as run:
        run.write_config({"command": "evaluate"})
        assert check_out(d, resume=True)  # a command's library call under the command's own lock
    assert check_out(d, resume=True) and not (d / runs.LOCK).exists()
    with runs.RunFolder(d, resume=True):  # the lock after a look is free to take
        pass
