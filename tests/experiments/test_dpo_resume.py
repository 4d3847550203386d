"""A dpo-train run killed at any write it makes (a checkpoint's files, the log, the model's save, the
checkpoints' removal, results.json) resumes to the run an uninterrupted training writes: the same steps (none
past max_steps), losses, token count, weights and files. The kill is a KeyboardInterrupt raised before the
n-th write under the run folder, as a kill -9 between two writes would stop the process (tests/study kills
its runs the same way); the writes are seen through an audit hook (files opened for writing, renames,
removals) and torch's and safetensors' native writers."""

import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from vrh import runs  # noqa: E402
from vrh.experiments import dpo  # noqa: E402
from vrh.experiments.dpo_comparison import train_run  # noqa: E402
from vrh.options import DpoTrainOptions  # noqa: E402
from tests.experiments.test_dpo import write_pairs  # noqa: E402

# 4 pairs in batches of 2: 2 steps an epoch, so max_steps 3 ends mid-epoch (where TRL's resume of a finished
# training ran a 4th step); checkpoints at steps 2 and 3
SETTINGS = DpoTrainOptions(lr=1e-3, epochs=1.0, max_steps=3, train_batch_size=2, grad_accum=1, save_steps=2)


class Kill:
    """Counts the writes under ``root`` and raises KeyboardInterrupt before the ``at``-th (0: only counts)."""

    active: "Kill | None" = None

    def __init__(self, root: Path, at: int = 0):
        self.root, self.at, self.seen, self.in_tree = os.path.realpath(root), at, [], False

    def under(self, path) -> bool:
        return os.path.realpath(os.fsdecode(path)).startswith(self.root + os.sep)

    def tick(self, what: str, path) -> None:
        path = os.fsdecode(path)
        self.seen.append(f"{what} {os.path.relpath(path, self.root) if os.path.isabs(path) else '(in tree) ' + path}")
        if len(self.seen) == self.at:
            Kill.active = None  # one kill; what runs while the interrupt unwinds is not counted
            raise KeyboardInterrupt(f"killed before write {self.at}: {self.seen[-1]}")


def _resolved(path, dir_fd):
    """``path`` as an absolute path when it is a name in the folder descriptor ``dir_fd`` (vrh.runs.safe_paths
    removes and renames that way), else as given."""
    path = os.fsdecode(path)
    if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(path):
        try:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        except OSError:
            pass
    return path


def _audit(event: str, args: tuple) -> None:
    k = Kill.active
    if k is None or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
        return
    path = args[0]
    if event in ("open", "vrh.safe_paths.open"):  # the second: a file vrh opens by name in a folder descriptor
        mode, flags = (args[1], args[2]) if event == "open" else (None, args[1])
        writes = any(c in mode for c in "wax+") if mode else bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
        if writes and k.under(path):
            k.tick("open", path)
    elif event == "shutil.rmtree":
        path = _resolved(path, args[1] if len(args) > 1 else None)
        k.in_tree = k.under(path)
        if k.in_tree:
            k.tick("rmtree", path)
    elif event in ("os.rename", "os.remove", "os.rmdir"):
        dir_fd = args[2] if event == "os.rename" else args[-1]
        relative = dir_fd not in (None, -1) and not os.path.isabs(os.fsdecode(path))
        full = _resolved(path, dir_fd)
        if k.under(full):
            k.tick(event, full)
        elif relative and k.in_tree:
            k.tick(event, path)  # inside an rmtree: the name relative to the folder being removed


_hooked = False


@pytest.fixture(scope="module")
def killer():
    """``killer(root, at)``: arm a :class:`Kill` (torch's and safetensors' writers wrapped too)."""
    global _hooked
    if not _hooked:  # an audit hook cannot be removed: one per process, idle while Kill.active is None
        sys.addaudithook(_audit)
        _hooked = True
    import transformers.modeling_utils as mu

    def native(real, name):
        def write(obj, f, *a, **kw):
            k = Kill.active
            if k is not None and isinstance(f, (str, os.PathLike)) and k.under(f):
                k.tick(name, f)
            return real(obj, f, *a, **kw)
        return write

    def arm(root: Path, at: int = 0) -> Kill:
        Kill.active = Kill(root, at)
        return Kill.active

    with pytest.MonkeyPatch.context() as m:
        m.setattr(torch, "save", native(torch.save, "torch.save"))
        m.setattr(mu, "safe_save_file", native(mu.safe_save_file, "safetensors"))
        yield arm
    Kill.active = None


def _train(checkpoint: str, pairs: Path, out: Path, **kw):
    return train_run(checkpoint, pairs, out, SETTINGS, config={"command": "dpo-train"}, **kw)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_checkpoint, tiny_dataset, killer):
    """The pairs, the run folder of an uninterrupted training and its writes, in order."""
    root = tmp_path_factory.mktemp("dpo_resume")
    pairs = write_pairs(root / "pairs", tiny_dataset)
    k = killer(root / "full")
    _train(tiny_checkpoint, pairs, root / "full")
    Kill.active = None
    return pairs, root / "full", k.seen


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def assert_same_training(full: Path, run: Path) -> None:
    a, b = runs.read_results(full), runs.read_results(run)
    assert (b["steps"], b["epochs"]) == (a["steps"], a["epochs"]) == (3, 1.5)  # no step past max_steps
    assert b["train_loss"] == pytest.approx(a["train_loss"], abs=1e-5)
    assert b["last_log"]["num_tokens"] == a["last_log"]["num_tokens"]  # the whole run's, not the resumed part's
    assert b["last_log"].keys() == a["last_log"].keys()
    assert all(b["last_log"][k] == pytest.approx(v, abs=1e-5) for k, v in a["last_log"].items())
    logged = [r for r in runs.read_jsonl(run / dpo.TRAIN_LOG) if "loss" in r]
    assert [r["step"] for r in logged] == [1, 2, 3]
    assert _files(run) == _files(full)  # model/ whole, no checkpoints/, no temporary or lock file left
    from safetensors.torch import load_file

    wa, wb = (load_file(f / dpo.MODEL_DIR / "model.safetensors") for f in (full, run))
    assert wa.keys() == wb.keys() and all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


def kill_and_resume(tiny_checkpoint, pairs: Path, full: Path, out: Path, killer, at: int, what: str) -> None:
    killer(out, at)
    with pytest.raises(KeyboardInterrupt):
        _train(tiny_checkpoint, pairs, out)
    Kill.active = None
    _train(tiny_checkpoint, pairs, out, resume=True)
    try:
        assert_same_training(full, out)
    except AssertionError as e:
        raise AssertionError(f"killed before write {at} ({what}): {e}") from e


# Kills that each need a fix: a checkpoint without its trainer_state.json (resume from the one before), a
# model being saved after the last checkpoint (no 4th step on resume), the checkpoints being removed after
# the model was saved (no second training)
POINTS = ["open checkpoints/checkpoint-3/trainer_state.json", "safetensors checkpoints/model/model.safetensors",
          "rmtree checkpoints/checkpoint-3"]


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_a_checkpoint_or_the_model_save_it_resumes_to_the_uninterrupted_run(
        point, uninterrupted, tiny_checkpoint, tmp_path, killer):
    pairs, full, writes = uninterrupted
    at = [i for i, w in enumerate(writes, 1) if w == point][-1]
    kill_and_resume(tiny_checkpoint, pairs, full, tmp_path / "run", killer, at, point)


@pytest.mark.slow
def test_killed_before_any_of_its_writes_it_resumes_to_the_uninterrupted_run(uninterrupted, tiny_checkpoint,
                                                                             tmp_path, killer):
    """Every write after config.json (84 of them: ~90 s). The writes before it are RunFolder's own (its lock,
    config.json), not the training's: a kill between writing config.json.tmp and renaming it leaves a folder
    that --resume refuses as not a vrh run (runs/folder.py's, every command alike)."""
    pairs, full, writes = uninterrupted
    first = writes.index("os.rename config.json.tmp") + 2
    for at, what in list(enumerate(writes, 1))[first - 1:]:
        kill_and_resume(tiny_checkpoint, pairs, full, tmp_path / f"run{at}", killer, at, what)
