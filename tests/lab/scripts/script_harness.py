"""Running a lab shell script for real (bash) with recording stand-ins for what it calls: a ``vrh`` first on PATH
and, beside a copy of the script, the Python scripts it runs from its own folder. Each call is one line of
``calls.log``; :func:`run_recorded` returns them split as the shell passed them."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path


def run_recorded(script: Path, tmp_path: Path, out: Path, python_scripts: tuple[str, ...] = (),
                 drop_env: tuple[str, ...] = (), **env: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run ``bash script out`` with every ``vrh`` call and every call of ``python_scripts`` (file names in the
    script's folder) recorded instead of run: a ``vrh`` call as ``vrh ARGS``, a script's as ``NAME ARGS``.
    ``drop_env`` names variables of this process not to pass on; ``env`` adds or replaces others."""
    bin_dir, scripts = tmp_path / "bin", tmp_path / "scripts"
    bin_dir.mkdir()
    scripts.mkdir()
    log = tmp_path / "calls.log"
    (bin_dir / "vrh").write_text(f'#!/usr/bin/env bash\nprintf "%q " vrh "$@" >> {log}\necho >> {log}\n')
    (bin_dir / "vrh").chmod(0o755)
    shutil.copy(script, scripts / script.name)
    for name in python_scripts:
        (scripts / name).write_text(f"import shlex, sys\nwith open({str(log)!r}, 'a') as f:\n"
                                    f"    f.write(shlex.join([{name!r}] + sys.argv[1:]) + '\\n')\n")
    # the script's `python` must be this interpreter (vrh importable); the recording vrh comes first
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    full_env = {k: v for k, v in os.environ.items() if k not in drop_env}
    full_env.update(PATH=path, **env)
    proc = subprocess.run(["bash", str(scripts / script.name), str(out)], env=full_env, capture_output=True,
                          text=True, timeout=60)
    calls = [shlex.split(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, calls
