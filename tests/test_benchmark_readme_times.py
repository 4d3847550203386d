"""benchmarks/readme_times.py times a job as the README's times need (issue 37 item 5): wall and CPU seconds
and the load it ran under, each run in its own fresh folder; its jobs are the README's commands. Checked on a
cheap command: the README's jobs take minutes (their times are the measurement, never asserted)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vrh_benchmark_readme_times", ROOT / "benchmarks" / "readme_times.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_a_command_is_timed_in_its_own_folder_with_its_cpu_time_and_the_load(bench, tmp_path, capsys):
    burn = "python -c \"import time; t = time.process_time(); exec('while time.process_time() - t < 0.3: pass')\""
    result = bench.main(["--command", f"burn={burn} && pwd > {{tmp}}/cwd", "--repeat", "2", "--work", str(tmp_path),
                         "--json", str(tmp_path / "times.json")])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == result == json.loads((tmp_path / "times.json").read_text())
    runs = result["runs"]
    assert [r["job"] for r in runs] == ["burn", "burn"] and all(r["returncode"] == 0 for r in runs)
    folders = {r["folder"] for r in runs}
    assert folders == {str(tmp_path / "burn_1"), str(tmp_path / "burn_2")}
    for r in runs:
        assert (Path(r["folder"]) / "cwd").read_text().strip() == str(ROOT)  # from the repository root
        assert r["cpu_s"] >= 0.3 and r["wall_s"] >= r["cpu_s"] / 64  # the child's CPU seconds, not this process's
        assert all(r[k] >= 0 for k in ("load_before", "load_during_mean", "load_during_max", "load_after"))
    s = result["summary"]["burn"]
    assert s["runs"] == 2 and s["cpu_min"] <= s["cpu_median"] <= s["cpu_max"] and s["wall_min"] <= s["wall_max"]
    assert result["machine"]["cpus"] >= 1


def test_a_failing_job_is_reported_with_its_log(bench, tmp_path, capsys):
    result = bench.main(["--command", "bad=echo broken; exit 3", "--work", str(tmp_path)])
    [run] = result["runs"]
    assert run["returncode"] == 3 and "broken" in Path(run["log"]).read_text()
    assert f"bad failed, rc 3: see {run['log']}" in capsys.readouterr().err


def test_bad_arguments_are_refused(bench, capsys):
    for argv in (["nojob"], ["--repeat", "0"], ["--command", "no-name"]):
        with pytest.raises(SystemExit):
            bench.main(argv)
    assert "the README's jobs: demo, suite" in capsys.readouterr().err


def test_every_job_is_a_command_the_readme_gives(bench):
    """The script times what the README says, not a variant: each job's command, runs/ for {tmp}, is in it (the
    lab's findings script: in lab/README.md, which gives its default folder)."""
    readme = " ".join((ROOT / "README.md").read_text().replace("\\\n", " ").split()
                      + (ROOT / "lab" / "README.md").read_text().split())
    for name, job in bench.JOBS.items():
        assert " ".join(job.command.replace("{tmp}", "runs").split()) in readme, name
        assert job.needs is None or job.needs in bench.JOBS


@pytest.mark.slow  # a clone of the tree and a pytest in it: about 15 s
def test_the_suite_runs_in_a_clone_of_this_tree_without_shared_and_its_counts_are_read(bench, tmp_path):
    """The README's test count is a user's: a fresh clone, where ../shared (real configs, the paper) is absent
    and the tests reading it skip; the clone runs its own code, and the counts come from pytest's summary."""
    suite = bench.JOBS["suite"]
    assert bench.run_job("setup", suite.setup, tmp_path).returncode == 0
    clone = tmp_path / "vrh"
    assert (clone / "benchmarks" / "readme_times.py").is_file() and not (tmp_path / "shared").exists()
    probe = ("python -c 'import vrh; print(vrh.__file__)' && python -m pytest -p no:cacheprovider "
             "tests/test_repo.py -k ci_runs")
    run = bench.run_job("probe", probe, tmp_path, cwd=suite.cwd, env=suite.env)
    assert run.returncode == 0, Path(run.log).read_text()
    assert Path(run.log).read_text().splitlines()[0] == str(clone / "src" / "vrh" / "__init__.py")
    assert run.tests["passed"] == 1 and run.tests["needs_shared"] == 0


def test_pytest_counts_are_read_from_its_summary_and_skip_reasons(bench):
    assert bench.pytest_counts("SKIPPED [2] tests/a.py:3: the real checkpoint files (../shared/real) are absent\n"
                               "SKIPPED [1] tests/b.py:1: x/shared/real/y absent (the shared real configs)\n"
                               "SKIPPED [4] tests/c.py:1: no GPU\n== 9 passed, 7 skipped in 3.0s ==") == {
        "passed": 9, "skipped": 7, "needs_shared": 3}
