"""Progress without a terminal: plain lines at a steady cadence, checked with a fake clock (no sleeping)."""

import pytest

from vrh.infra import console as console_mod
from vrh.infra.console import progress


class FakeClock:
    def __init__(self):
        self.now = 1000.0  # any origin: only differences matter

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def progress_on(monkeypatch):
    monkeypatch.delenv("VRH_NO_PROGRESS", raising=False)


def run(total, steps, seconds_per_step, description="sweep grounding", stop_after=None):
    """Advance one item per step, the clock moving ``seconds_per_step`` before each; the lines written."""
    clock, lines = FakeClock(), []
    with progress(total, description, interactive=False, clock=clock, write=lines.append) as advance:
        for i in range(steps if stop_after is None else stop_after):
            clock.now += seconds_per_step
            advance()
    return lines


def test_a_line_every_tenth_of_the_work():
    lines = run(400, 400, 0.125)  # a binary fraction: the fake clock adds up exactly
    assert len(lines) == 10  # 10%, 20%, ..., 100%; no extra final line repeating 400/400
    assert lines[2] == "sweep grounding: 120/400 samples (30%) 0:00:15 elapsed, 8/s, ETA 0:00:35"
    assert lines[-1] == "sweep grounding: 400/400 samples (100%) 0:00:50 elapsed, 8/s, ETA 0:00:00"
    assert [int(l.split(": ")[1].split("/")[0]) for l in lines] == list(range(40, 401, 40))


def test_a_line_every_30_seconds_when_tenths_are_slow():
    lines = run(1000, 60, 7.0)  # a tenth (100 items) would take 700 s
    done = [int(l.split(": ")[1].split("/")[0]) for l in lines]
    # 30 s after the previous line, at 7 s per item: every 5th item (35 s), then the final line
    assert done == [5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60]
    assert lines[0] == "sweep grounding: 5/1000 samples (0%) 0:00:35 elapsed, 0.143/s, ETA 1:56:05"


def test_final_line_when_the_loop_stops_early():
    lines = run(10, 10, 1.0, stop_after=3)
    assert lines == ["sweep grounding: 1/10 samples (10%) 0:00:01 elapsed, 1/s, ETA 0:00:09",
                     "sweep grounding: 2/10 samples (20%) 0:00:02 elapsed, 1/s, ETA 0:00:08",
                     "sweep grounding: 3/10 samples (30%) 0:00:03 elapsed, 1/s, ETA 0:00:07"]
    lines = run(100, 100, 1.0, stop_after=13)
    assert lines[-1].startswith("sweep grounding: 13/100 samples (13%)") and len(lines) == 2


def test_final_line_written_when_the_loop_raises():
    lines = []
    with pytest.raises(RuntimeError):
        with progress(100, "detect", interactive=False, clock=FakeClock(), write=lines.append) as advance:
            advance(4)
            raise RuntimeError("boom")
    assert lines == ["detect: 4/100 samples (4%) 0:00:00 elapsed, ?/s, ETA 0:00:00"]


def test_no_progress_yet_has_unknown_eta():
    lines = []
    with progress(5, "detect", interactive=False, clock=FakeClock(), write=lines.append):
        pass
    assert lines == ["detect: 0/5 samples (0%) 0:00:00 elapsed, ?/s, ETA ?"]


def test_silent_under_vrh_no_progress(monkeypatch):
    monkeypatch.setenv("VRH_NO_PROGRESS", "1")
    assert run(10, 10, 100.0) == []


def test_terminal_gets_the_bar_not_lines():
    lines = []
    with progress(3, "detect", interactive=True, write=lines.append) as advance:
        advance(3)
    assert lines == []


def test_default_check_sends_lines_to_stderr_when_not_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(console_mod, "_interactive", lambda: False)
    with progress(2, "eval") as advance:
        advance()
        advance()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[-1].startswith("eval: 2/2 samples (100%) ") and err[-1].endswith("ETA 0:00:00")


def test_lines_name_the_unit():
    lines = []
    with progress(2, "sweep vqa", unit="generations", interactive=False, clock=FakeClock(), write=lines.append) as adv:
        adv(2)
    assert lines == ["sweep vqa: 2/2 generations (100%) 0:00:00 elapsed, ?/s, ETA 0:00:00"]


def test_only_rank_0_shows_progress(monkeypatch):
    import vrh.infra.distributed

    monkeypatch.setattr(vrh.infra.distributed, "world", lambda: vrh.infra.distributed.World(rank=1, size=2))
    assert run(10, 10, 1.0) == []


def test_results_print_once_under_a_data_parallel_launch(monkeypatch, capsys):
    """Under torchrun every rank ran the command and each printed the result: rank 0 only now."""
    import vrh.infra.distributed

    for rank, want in ((0, "evaluate: accuracy 0.900\n"), (1, "")):
        monkeypatch.setattr(vrh.infra.distributed, "world", lambda r=rank: vrh.infra.distributed.World(rank=r, size=2))
        console_mod.print_result("evaluate: accuracy 0.900")
        console_mod.print_table("detect: top heads", ["head", "score"], [["3:3", 0.805]])
        out = capsys.readouterr().out
        assert out.startswith(want) and (("3:3" in out) == (rank == 0)), (rank, out)


def test_a_long_message_is_one_line_in_a_log(capsys):
    long = "detect: 20 samples scored, 0 skipped -> " + "/very/long/run/folder" * 10
    console_mod.console.print(long)
    assert capsys.readouterr().err.splitlines() == [long]


def test_progress_can_be_turned_off_from_python(monkeypatch, capsys, tiny_checkpoint, tiny_dataset):
    """Library functions printed progress with no way to stop it from Python (issue 26 item 25):
    ``progress=False`` on the notebook's entry points, ``progress_shown(False)`` around anything."""
    import vrh
    from vrh.experiments import conditions
    from vrh.infra.console import progress, progress_enabled, progress_shown

    monkeypatch.delenv("VRH_NO_PROGRESS", raising=False)
    with progress_shown(False):
        assert not progress_enabled()
        with progress(3, "quiet", interactive=False) as advance:
            advance(3)
    assert progress_enabled() and "quiet" not in capsys.readouterr().err
    lm = vrh.load_model(tiny_checkpoint)
    samples = [s for s in vrh.load_dataset(tiny_dataset) if s.task == "grounding"][:2]
    vrh.detect_heads(lm, samples, max_new_tokens=2, progress=False)
    vrh.run_conditions(lm, vrh.get_task("grounding"), samples, [conditions.none()], max_new_tokens=2, progress=False)
    err = capsys.readouterr().err
    assert "detect:" not in err and "evaluate:" not in err
    vrh.run_conditions(lm, vrh.get_task("grounding"), samples, [conditions.none()], max_new_tokens=2)
    assert "evaluate: 2/2 generations" in capsys.readouterr().err  # the default still shows it


# --- user text is printed as typed, never read as rich markup (issue 33 item 9) ---------------------------
TYPED = ["runs/rep[/x]", "runs/exp[v2]", "runs/[bold]b[/bold]", "runs/a\\[b]", "runs/:thumbs_up:"]


@pytest.mark.parametrize("text", TYPED)
def test_console_lines_print_what_the_user_typed(capsys, text):
    """``--out "runs/rep[/x]"`` crashed with rich's MarkupError after the report was written, and
    ``--out runs/exp[v2]`` printed ``runs/exp/report.html``: every line, table and bar prints text as given."""
    console_mod.console.print(f"report: {text}/report.html")
    console_mod.warn(f"--model {text} answered none")
    console_mod.report_skipped([{"id": "s1", "reason": f"image {text}/1.png not found"}], f"evaluate {text}")
    console_mod.print_table(f"sweep {text}", ["run"], [[text]])
    with progress(1, f"convert {text}", interactive=True) as advance:
        advance()
    cap = capsys.readouterr()
    err = cap.err.splitlines()
    assert err[:3] == [f"report: {text}/report.html", f"warning: --model {text} answered none",
                       f"evaluate {text}: 1 sample(s) skipped ('s1'): image {text}/1.png not found; listed in "
                       "results.json"]
    assert f"convert {text}" in cap.err.split("\n", 3)[3]
    assert cap.out.count(text) == 2 and f"│ {text} │" in cap.out  # the title (wrapped to the table) and the cell


def test_no_source_line_prints_rich_markup():
    """The console reads no markup, so a ``[yellow]...[/yellow]`` left in a message would print its tags: colour
    goes through ``warn`` or a ``Text`` style instead."""
    import ast
    import re
    from pathlib import Path

    import vrh

    tag = re.compile(r"\[/?(bold|dim|italic|underline|red|green|yellow|blue|magenta|cyan|white|link)\b[^\]]*\]")
    found = []
    for path in Path(vrh.__file__).resolve().parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                    "print", "warn", "log", "progress", "progress_bar"):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and tag.search(sub.value):
                        found.append(f"{path.name}:{sub.lineno}: {sub.value[:60]}")
    assert not found, found
