"""The package installs without a clone (issue 46 item 21): a wheel built from the tree (``python -m build``)
installs into a fresh virtualenv and ``vrh demo`` runs from it, with the shipped organism inside and no test
files. Slow (a build, a venv, a demo: about a minute): ``python -m pytest -m slow tests/test_wheel.py``.

The virtualenv reuses this environment's packages (``--system-site-packages``, no pip of its own: torch is not
downloaded again, and nothing needs the network); the wheel goes in with this environment's pip and
``--ignore-installed`` (this environment's own vrh, an editable install, is left alone), and ``pip check`` in the
venv says vrh's requirements are met. The build runs on a copy of the tree's tracked files, so what it packs is
what a clone holds, not scratch files beside it."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tree_copy(dest: Path) -> Path:
    """The repository's tracked files (those of a clone), or, outside a git checkout, what the build reads."""
    dest.mkdir()
    try:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        names = [n for n in files.decode().split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(ROOT)) for top in ("src", "lab") for p in (ROOT / top).rglob("*") if p.is_file()]
        names += ["pyproject.toml", "README.md"]
    for name in names:
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.slow
def test_a_wheel_built_from_the_tree_installs_in_a_fresh_venv_and_runs_the_demo(tmp_path):
    pytest.importorskip("build", reason="python -m build needs the build package (pip install build)")
    tree = _tree_copy(tmp_path / "tree")
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(tree)],
                   check=True, capture_output=True)
    (wheel,) = dist.glob("vrh-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n or Path(n).name.startswith("test_")]
    organisms = {n.split("/")[3] for n in names if n.startswith("vrh/organism/checkpoints/")}
    assert organisms == {"organism_a"}  # the one `--model organism` loads; the others stay in the source tree
    assert "vrh/organism/checkpoints/organism_a/model.safetensors" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--ignore-installed",
                    "--no-index", str(wheel)], check=True, capture_output=True)
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True)
    assert not [ln for ln in check.stdout.splitlines() if ln.startswith("vrh ")], check.stdout

    work = tmp_path / "work"  # an empty folder: nothing of the tree in reach
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["VRH_NO_PROGRESS"] = "1"
    where = subprocess.run([str(python), "-c", "import vrh, vrh.models.loading as l; print(vrh.__file__); "
                            "print(l.organism_path())"], cwd=work, env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert where == [str(site / "vrh" / "__init__.py"), str(site / "vrh" / "organism" / "checkpoints" / "organism_a")]
    demo = subprocess.run([str(venv / "bin" / "vrh"), "demo", "--out", "demo", "--n-detect", "8", "--n-eval", "8",
                           "--n-vqa", "4", "--batch-size", "4"], cwd=work, env=env, capture_output=True, text=True)
    assert demo.returncode == 0, demo.stderr[-2000:]
    assert "grounding, top-3 VRHs masked" in demo.stdout
    assert (work / "demo" / "results.json").is_file() and (work / "demo" / "report" / "report.html").is_file()
