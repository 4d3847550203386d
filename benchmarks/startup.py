"""What a ``vrh`` call costs before it does anything (issue 46 item 20): the CPU time of ``vrh --help``, of
``vrh detect --help`` and of ``vrh models`` (which imports every adapter module to list the families), against a
bare ``python -c pass``, and which heavy libraries they import.

Why: every command builds the whole parser (``vrh --help`` lists them all), so whatever one command's
``add_arguments`` imports, every call pays. It was about 1 s of CPU (``vrh report``'s arguments imported the
report builders, matplotlib and numpy); a deterministic test keeps torch and transformers out
(``tests/test_startup.py``); this script gives the figure.

CPU time (user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``) is what the machine's load moves least;
wall time is printed beside it. Each call runs in a fresh process from an empty temporary folder (a folder
named ``vrh`` in the current one would shadow the package, docs/notebook.md), ``--repeat`` times, interleaved
round by round; medians are printed. The last line is one JSON object::

    python benchmarks/startup.py              # 7 rounds
    python benchmarks/startup.py --repeat 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time

CALLS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "vrh --help": [sys.executable, "-m", "vrh", "--help"],
    "vrh detect --help": [sys.executable, "-m", "vrh", "detect", "--help"],
    "vrh models": [sys.executable, "-m", "vrh", "models"],  # lists the families: imports every adapter module
}
HEAVY = ("torch", "transformers", "numpy", "matplotlib", "PIL", "rich")
PROBE = ("import contextlib, io, sys, vrh.cli\n"
         "with contextlib.redirect_stdout(io.StringIO()):\n"
         "    try:\n        vrh.cli.main(sys.argv[1:])\n    except SystemExit:\n        pass\n"
         f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")


def _cpu_of(cmd: list[str], cwd: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``cmd`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def heavy_imports(argv: list[str], cwd: str) -> list[str]:
    """The heavy libraries in ``sys.modules`` after ``vrh ARGV`` (``--help`` exits; the exit is caught)."""
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.split()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7, help="rounds (each call once per round)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vrh-startup-") as cwd:
        cpu = {name: [] for name in CALLS}
        wall = {name: [] for name in CALLS}
        for _ in range(args.repeat):
            for name, cmd in CALLS.items():
                c, w = _cpu_of(cmd, cwd)
                cpu[name].append(c)
                wall[name].append(w)
        heavy = {"vrh --help": heavy_imports(["--help"], cwd), "vrh detect --help": heavy_imports(
            ["detect", "--help"], cwd), "vrh models": heavy_imports(["models"], cwd)}
    result = {"repeat": args.repeat,
              "cpu_s": {n: round(statistics.median(v), 3) for n, v in cpu.items()},
              "wall_s": {n: round(statistics.median(v), 3) for n, v in wall.items()},
              "heavy_imports": heavy}
    base = result["cpu_s"]["python -c pass"]
    for name in CALLS:
        libs = ", ".join(heavy[name]) or "none of " + "/".join(HEAVY) if name in heavy else ""
        print(f"{name:<20} CPU {result['cpu_s'][name]:.3f} s (+{result['cpu_s'][name] - base:.3f} over bare python), "
              f"wall {result['wall_s'][name]:.3f} s" + (f"; imports {libs}" if libs else ""))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
