"""The repository itself: every clone downloads what is tracked, so no training state and no big files.

Skipped outside a git checkout (an unpacked sdist has no history to keep small)."""

import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 8_000_000  # DEVELOPERS.md: no tracked file over 8 MB
CHECKPOINT_NAMES = ("ckpt.pt", "optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin")
OPTIMIZER_KEYS = {"opt", "optimizer", "optimizer_state_dict", "optim", "scheduler"}


def _tracked() -> list[Path]:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.stdout.decode().split("\0") if p and (ROOT / p).is_file()]


def test_no_tracked_file_exceeds_8_mb():
    big = [f"{p.relative_to(ROOT)} ({p.stat().st_size / 1e6:.1f} MB)" for p in _tracked() if p.stat().st_size > MAX_BYTES]
    assert not big, f"tracked files over 8 MB (training state does not belong in the tree): {big}"


def test_no_tracked_file_is_a_training_checkpoint():
    """A resume checkpoint (optimizer, RNG, step) of a run is reproduced by a build, never committed."""
    import torch

    found = []
    for p in _tracked():
        if p.name in CHECKPOINT_NAMES:
            found.append(str(p.relative_to(ROOT)))
        elif p.suffix in (".pt", ".pth", ".bin"):
            state = torch.load(p, weights_only=True, map_location="cpu")
            if isinstance(state, dict) and OPTIMIZER_KEYS & set(state):
                found.append(f"{p.relative_to(ROOT)} (holds {sorted(OPTIMIZER_KEYS & set(state))})")
    assert not found, f"tracked training checkpoints: {found}"


def test_the_wheel_ships_only_the_organism_commands_load_by_default():
    from vrh.models.loading import organism_path

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["include-package-data"] is False  # package-data is the whole list
    assert setuptools["package-data"]["vrh"] == [f"organism/checkpoints/{organism_path().name}/*"]


def test_ci_runs_the_readmes_test_command():
    """.ci/run installs, then runs exactly what the README's second set-up command runs after its install."""
    readme = (ROOT / "README.md").read_text().splitlines()
    line = next(l for l in readme if l.startswith("pip install torch==2.13.0 -e '.[test]'"))
    ci = [l for l in (ROOT / ".ci" / "run").read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert line.split(" && ", 1)[1] == ci[-1]
    assert "ruff check" in ci[-1] and ci[-1].endswith("python -m pytest")
