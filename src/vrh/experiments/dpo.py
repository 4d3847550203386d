"""DPO on VRH preference pairs through TRL's ``DPOTrainer`` (paper App. B): pairs in, a checkpoint out.

What vrh adds around TRL, and why:

* **The model and the reference come from vrh's loader** (:func:`vrh.models.loading.load_model`), so the
  policy is the checkpoint ``--model`` names (the ``organism`` alias included) through its adapter; the
  reference is a second load of it, passed explicitly (TRL would reload ``config._name_or_path`` itself, which
  fails for a model that was never saved, and it patches the reference's forward: never the caller's model).
* **The processor TRL tokenizes with** (:func:`training_processor`): TRL renders prompt and answers with the
  chat template and tokenizes them with ``add_special_tokens=False``; vrh's inference tokenizes the same
  rendered chat *with* special tokens. Where the two differ by the BOS the tokenizer adds (LLaVA's tokenizer,
  the organism's), a copy of the processor gets a chat template that writes that BOS itself, so the model
  is trained on the token sequence it answers from. Anything else that differs is refused (a DPO model
  trained on other inputs than it is evaluated on would measure nothing). The checkpoint is saved with the
  original processor.
* **The trained model is a normal checkpoint folder** (``OUT/model``: weights, processor, and the
  checkpoint's ``vrh.json`` adapter settings copied over), so ``--model OUT/model`` loads it like the base.
* **Progress**: every TRL log line (loss, rewards/margins, rewards/accuracies, learning rate) is appended
  to ``OUT/train_log.jsonl`` as it comes; a terminal shows each step's line, a log one per tenth of the
  steps or per 30 s (the step's values, elapsed time and ETA: :class:`vrh.infra.console.LineProgress`).
* **Resumable**: TRL checkpoints go to ``OUT/checkpoints`` every ``save_steps`` steps (the last one kept);
  ``resume`` continues from the newest *complete* one (:func:`latest_checkpoint`: a kill, Ctrl-C or a full
  disk while one is written leaves it without its ``trainer_state.json``, which TRL writes last), its weights
  reloaded through ``from_pretrained`` (:func:`_checkpoint_loader`: the Trainer's own reload loads none of
  them for these families). A training that had reached ``max_steps`` is only saved on resume (TRL would run
  one step past it), and a resumed run's token count goes on from the checkpoint's. The checkpoints are
  deleted once the model is saved (optimizer state is 2x the weights: never left in a tree).
* **Nothing removed that vrh did not write** (:mod:`vrh.runs.written`): each checkpoint is recorded in
  ``checkpoints/.vrh-written`` before TRL writes it, and ``model/`` appears whole or not at all (saved into
  ``checkpoints/model``, its files recorded in its own record, then renamed), so a later resume or
  ``--overwrite`` removes exactly what the training wrote.
* **A failed write** (a full disk) is an ``OSError`` naming the file or folder (:func:`_saving`): torch's and
  safetensors' writers report it as a ``RuntimeError`` without a path.

TRL refuses ``precompute_ref_log_probs`` for vision data, so the reference runs every step (the memory it
needs is measured by :func:`vrh.experiments.dpo_memory.step_memory`). ``max_length=None``: truncation
could cut image tokens.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.infra.console import console
from vrh.runs import safe_paths, written

MODEL_DIR = "model"  # the trained checkpoint, inside a dpo-train run folder
CHECKPOINTS = "checkpoints"  # TRL's resumable checkpoints while training runs
SAVING = "model"  # inside CHECKPOINTS: the trained model while it is saved, renamed to MODEL_DIR when whole
TRAINER_STATE = "trainer_state.json"  # TRL writes it last into a checkpoint: a whole one marks it complete
MODEL_CARD = "README.md"  # TRL's model card, rewritten into CHECKPOINTS with every checkpoint
TRAIN_LOG = "train_log.jsonl"  # one record per TRL log call
SETTINGS_FILES = ("vrh.json",)  # per-checkpoint adapter settings the trained model must keep
LOG_KEYS = ("loss", "rewards/margins", "rewards/accuracies", "learning_rate")  # printed, in this order


def require_trl() -> str:
    """TRL's version, or an ImportError that says how to install it (an optional extra of vrh)."""
    try:
        import trl
    except ImportError:
        raise ImportError("DPO training needs TRL: pip install 'vrh[dpo]' (or pip install trl)") from None
    return trl.__version__


def pairs_file(pairs: str | os.PathLike) -> Path:
    """``pairs.jsonl`` of a dpo-pairs run folder, or the file itself."""
    path = Path(pairs)
    path = path / runs.PAIRS if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"--pairs {pairs}: no {runs.PAIRS} there (a vrh dpo-pairs run folder is expected)")
    return path


def load_pairs(pairs: str | os.PathLike):
    """The pairs as a ``datasets.Dataset`` TRL trains on: image paths decoded lazily as PIL images."""
    from datasets import Dataset, Image, Sequence

    path = pairs_file(pairs)
    rows = runs.read_jsonl(path)
    if not rows:
        raise ValueError(f"{path} holds no pairs (every sample was dropped: see the run's results.json); "
                         "nothing to train on")
    missing = sorted({p for r in rows for p in r["images"] if not Path(p).is_file()})
    if missing:
        raise FileNotFoundError(f"{len(missing)} images of {path} are missing, e.g. {missing[0]}")
    import datasets

    was_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a bar for an instant cast of a few rows is noise; restored below
    try:
        return Dataset.from_list(rows).cast_column("images", Sequence(Image()))
    finally:
        if was_on:
            datasets.enable_progress_bars()


def training_processor(processor: Any, adapter: Any) -> Any:
    """``processor``, or a copy whose chat template writes the BOS the tokenizer adds at inference, such that
    TRL's tokenization of a prompt equals vrh's (see the module docstring); ValueError if no such fix exists."""
    import copy

    tok = processor.tokenizer
    chat = adapter.chat_text(processor, "where is the cat ?")
    with_special = tok(chat, add_special_tokens=True)["input_ids"]
    without = tok(chat, add_special_tokens=False)["input_ids"]
    if with_special == without:
        return processor
    bos = tok.bos_token
    if bos is None or with_special != [tok.bos_token_id, *without]:
        raise ValueError(f"{type(processor).__name__}: vrh's inference adds special tokens {with_special[:3]}... "
                         f"that TRL's tokenization ({without[:3]}...) lacks, and not just a leading BOS; no "
                         "training processor for it")
    fixed = copy.deepcopy(processor)
    fixed.chat_template = "{{ bos_token }}" + processor.chat_template
    return fixed


def checkpoint_state(path: str | os.PathLike) -> dict[str, Any] | None:
    """The trainer state of the TRL checkpoint folder ``path`` (``checkpoint-<step>``) if it is complete, else
    None. TRL writes ``trainer_state.json`` after the weights, optimizer, scheduler and RNG state, so a whole one
    for the folder's step means the rest is there; a kill or a full disk mid-checkpoint leaves it absent or
    torn."""
    path = Path(path)
    step = re.fullmatch(r"checkpoint-(\d+)", path.name)
    from vrh.infra.json_text import read_json

    try:  # bounded: a checkpoint folder may come from anyone
        state = read_json(path / TRAINER_STATE, max_bytes=2**26, max_depth=64)
    except (OSError, ValueError):
        return None
    ok = step is not None and isinstance(state, dict) and state.get("global_step") == int(step[1])
    return state if ok else None


def latest_checkpoint(folder: str | os.PathLike) -> str | None:
    """The newest complete TRL checkpoint under ``folder`` (:func:`checkpoint_state`), or None."""
    folder = Path(folder)
    found = [(int(c.name.split("-")[1]), c) for c in _checkpoints(folder) if checkpoint_state(c) is not None]
    return str(max(found)[1]) if found else None


def _checkpoints(folder: Path) -> list[Path]:
    """The ``checkpoint-<step>`` folders under ``folder``, complete or not."""
    if not folder.is_dir():
        return []
    return [c for c in folder.iterdir() if re.fullmatch(r"checkpoint-\d+", c.name) and c.is_dir()]


@dataclass(frozen=True)
class TrainOutcome:
    """What :func:`train_dpo` did: steps and epochs run, the mean training loss (over every step's logged
    loss, resumed runs included), the last log record (loss, rewards), which checkpoint it resumed from,
    where the model is, how long it took, the peak memory."""

    steps: int
    epochs: float
    train_loss: float
    last_log: dict[str, Any]
    resumed_from: str | None
    model_dir: str
    seconds: float
    peak_memory_bytes: int | None
    peak_memory_kind: str


def _log_callback(path: Path, *, interactive: bool | None = None, clock=time.monotonic, write=None):
    """The Trainer callback that logs (``interactive``: a terminal, None: look at stderr; ``clock`` and
    ``write`` feed the log's lines, for tests)."""
    from transformers import TrainerCallback

    from vrh.infra.console import LineProgress, progress_enabled

    class LogToFile(TrainerCallback):
        """Each TRL log record appended to ``train_log.jsonl`` (flushed: a crash keeps what was logged) and
        shown: every step on a terminal, in a log one line per tenth of the steps or per 30 s (TRL logs every
        step: hundreds of lines would bury the rest of the log)."""

        lines: LineProgress | None = None

        def on_train_begin(self, args, state, control, **kw):  # a resumed run begins at its checkpoint's step
            self.lines = LineProgress(state.max_steps, f"dpo {path.parent.name}", unit="steps", clock=clock,
                                      initial=state.global_step, **({"write": write} if write else {}))

        def on_log(self, args, state, control, logs=None, **kw):
            rec = {"step": state.global_step, "epoch": state.epoch, **(logs or {})}
            with _saving(path), safe_paths.open_append(path.parent, path) as f:  # never through a link, nor a hard link
                f.write(json.dumps(rec) + "\n")
            shown = " ".join(f"{k.split('/')[-1]} {rec[k]:.4g}" for k in LOG_KEYS if isinstance(rec.get(k), float))
            if not shown or not progress_enabled():  # the end-of-training summary record has none of them
                return
            if (console.is_terminal or console.is_jupyter) if interactive is None else interactive:
                console.print(f"dpo step {state.global_step}/{state.max_steps}: {shown}")
                return
            self.lines.advance(state.global_step - self.lines.done, detail=shown)

    return LogToFile()


def dpo_config(opts: Any, output_dir: str | os.PathLike, *, device: str, dtype: str):
    """TRL's ``DPOConfig`` from vrh's options (:class:`vrh.options.DpoTrainOptions`)."""
    from trl import DPOConfig

    return DPOConfig(output_dir=str(output_dir), learning_rate=opts.lr, num_train_epochs=opts.epochs,
                     max_steps=opts.max_steps, beta=opts.beta, per_device_train_batch_size=opts.train_batch_size,
                     gradient_accumulation_steps=opts.grad_accum, seed=opts.train_seed, max_length=None,
                     logging_steps=1, save_strategy="steps", save_steps=opts.save_steps, save_total_limit=1,
                     report_to="none", use_cpu=str(device).startswith("cpu"), bf16=dtype == "bfloat16",
                     fp16=dtype == "float16", remove_unused_columns=False, dataloader_num_workers=0,
                     disable_tqdm=True)


def train_dpo(policy: Any, reference: Any, dataset: Any, out: str | os.PathLike, opts: Any, *, device: str = "cpu",
              dtype: str = "float32", resume: bool = False) -> TrainOutcome:
    """DPO-train ``policy`` (a :class:`vrh.models.loading.LoadedModel`, trained in place, left in eval mode)
    against ``reference`` (another load of the same checkpoint, never trained) on ``dataset``
    (:func:`load_pairs`); writes ``out/model`` (the checkpoint), ``out/train_log.jsonl`` and, while running,
    ``out/checkpoints``. ``resume`` continues from the newest complete checkpoint there (none: from the start);
    a training that had finished (its model saved, or its last checkpoint written) is not trained again, its
    weights loaded into ``policy``."""
    import torch

    if policy.model is reference.model:
        raise ValueError("the policy and the reference must be two loads of the model (DPO trains the policy)")
    out = Path(out)
    ckpt_dir, model_dir, log = out / CHECKPOINTS, out / MODEL_DIR, out / TRAIN_LOG
    t0 = time.time()
    cuda = str(device).startswith("cuda") and torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    if resume and written.has_record(model_dir):  # renamed into place whole: the training and its save finished
        _load_weights(policy.model, model_dir)
        written.remove_written(ckpt_dir, "dpo-train")
        policy.model.eval()
        return _outcome(log, model_dir, None, t0, cuda)
    resumed = latest_checkpoint(ckpt_dir) if resume else None
    state = checkpoint_state(resumed) if resumed else {}
    if resumed is None:  # from the start: nothing of an earlier training in `out` is kept
        written.remove_written(model_dir, "dpo-train")
        written.remove_written(ckpt_dir, "dpo-train")
        safe_paths.unlink(out, log)  # one of the run folder's own files (runs.COMMAND_FILES), not a recorded folder
    else:
        for other in _checkpoints(ckpt_dir):  # older ones, and newer ones a kill left incomplete
            if str(other) != resumed:
                _remove_tree(ckpt_dir, other.name)
        _trim_log(log, state["global_step"])
    with warnings.catch_warnings():
        # TRL 1.16 calls transformers 5's deprecated gradient_checkpointing names on every step: not the user's to fix
        warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.*deprecated", category=FutureWarning)
        trainer = _trainer(policy, reference, dataset, ckpt_dir, log, opts, device=device, dtype=dtype)
        if resumed and state["global_step"] >= state.get("max_steps", 0) > 0:
            # killed after its last checkpoint: the Trainer checks max_steps only after a step, so resuming one
            # that ends mid-epoch trained a step past it (at learning rate 0); the finished weights are just saved
            trainer._load_from_checkpoint(resumed)
        else:
            if resumed:  # TRL counts num_tokens from 0 in each trainer: go on from the checkpoint's count
                tokens = [r["num_tokens"] for r in state.get("log_history", []) if "num_tokens" in r]
                trainer._total_train_tokens = int(tokens[-1]) if tokens else 0
            trainer.train(resume_from_checkpoint=resumed)
    save_model(trainer, policy, ckpt_dir, model_dir)
    written.remove_written(ckpt_dir, "dpo-train")  # resumable state is only needed until the model is saved
    policy.model.eval()
    return _outcome(log, model_dir, resumed, t0, cuda)


def _trainer(policy: Any, reference: Any, dataset: Any, ckpt_dir: Path, log: Path, opts: Any, *, device: str,
             dtype: str) -> Any:
    """TRL's ``DPOTrainer`` with vrh's log callback, checkpoint loader (:func:`_checkpoint_loader`) and a
    checkpoint save that records the checkpoint before TRL writes it (:func:`_recording_save`)."""
    from transformers import PrinterCallback
    from trl import DPOTrainer

    trainer = DPOTrainer(model=policy.model, ref_model=reference.model, train_dataset=dataset,
                         args=dpo_config(opts, ckpt_dir, device=device, dtype=dtype),
                         processing_class=training_processor(policy.processor, policy.adapter),
                         callbacks=[_log_callback(log)])
    trainer.remove_callback(PrinterCallback)  # transformers' raw dict per log: ours prints one line instead
    trainer._load_from_checkpoint = _checkpoint_loader(trainer)
    trainer._save_checkpoint = _recording_save(trainer, ckpt_dir)
    return trainer


def _recording_save(trainer: Any, ckpt_dir: Path):
    """The trainer's checkpoint save, with ``checkpoint-<step>/`` (and TRL's model card beside it) recorded in
    ``ckpt_dir``'s record first (:mod:`vrh.runs.written`), so whatever a kill leaves of it is removable, and a
    failed write named (:func:`_saving`)."""
    real = trainer._save_checkpoint

    def save(model: Any, trial: Any) -> None:
        name = f"checkpoint-{trainer.state.global_step}"  # transformers' PREFIX_CHECKPOINT_DIR-<step>
        with _saving(ckpt_dir / name):
            written.record(ckpt_dir, [MODEL_CARD, f"{name}/"])
            real(model, trial)

    return save


def save_model(trainer: Any, policy: Any, ckpt_dir: Path, model_dir: Path) -> None:
    """Save the trained model as ``model_dir``, which appears whole or not at all: it is saved into
    ``ckpt_dir/model`` (a tree recorded in ``ckpt_dir``'s record), its files are recorded in its own record
    (:mod:`vrh.runs.written`), and the folder is renamed. A run killed before the rename left no ``model_dir``:
    its resume saves again from the last checkpoint."""
    staging = ckpt_dir / SAVING
    with _saving(staging):
        written.record(ckpt_dir, [SAVING + "/"])
        _remove_tree(ckpt_dir, SAVING)  # a save an earlier run did not finish
        written.record(staging, [])  # the record first: record() refuses a folder holding files it never named
        trainer.save_model(str(staging))
        save_checkpoint_extras(policy, staging)
        files = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        written.record(staging, [f for f in files if f != written.MANIFEST])
        written.remove_written(model_dir, "dpo-train")  # a model of an earlier training in this folder
        safe_paths.replace(ckpt_dir.parent, staging, model_dir)


def _remove_tree(folder: Path, name: str) -> None:
    """Delete ``folder/name``, a tree vrh recorded writing there (a TRL checkpoint, a model being saved);
    refuse anything else (:class:`vrh.runs.written.NotWrittenByVrh`)."""
    path = folder / name
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir() or f"{name}/" not in written.recorded(folder):
        raise written.NotWrittenByVrh(f"{path} is not a folder vrh recorded writing; refusing to delete it: move it "
                                      "away, or choose another --out")
    safe_paths.rmtree(folder, path)  # a link inside the tree is removed itself, never what it points to


def _trim_log(log: Path, step: int) -> None:
    """Keep ``log``'s records up to ``step`` (the checkpoint a resume continues from: the steps after it are
    trained and logged again) and drop a last line a kill tore."""
    if log.is_file():
        with _saving(log):
            runs.write_jsonl(log, [r for r in runs.read_jsonl(log) if r.get("step", 0) <= step])


def _outcome(log: Path, model_dir: Path, resumed: str | None, t0: float, cuda: bool) -> TrainOutcome:
    """What the training did, from its log (one record per step: every step's loss, the last step's epoch)."""
    import torch

    records = runs.read_jsonl(log) if log.is_file() else []
    per_step = {r["step"]: r for r in records if "loss" in r}  # a step redone after a resume: its last record
    if not per_step:
        raise ValueError(f"{log} records no training step; the training in {log.parent} cannot be summed up: "
                         "train it again with --overwrite")
    last = per_step[max(per_step)]
    # the mean over every step's logged loss: the Trainer's own training_loss covers only a resumed run's part
    mean_loss = sum(r["loss"] for r in per_step.values()) / len(per_step)
    peak = torch.cuda.max_memory_allocated() if cuda else _peak_rss()
    return TrainOutcome(steps=int(last["step"]), epochs=float(last.get("epoch") or 0.0), train_loss=mean_loss,
                        last_log=last, resumed_from=resumed, model_dir=str(model_dir), seconds=time.time() - t0,
                        peak_memory_bytes=peak, peak_memory_kind="cuda max_memory_allocated" if cuda else
                        "process peak RSS")


@contextmanager
def _saving(path: Path) -> Iterator[None]:
    """A write under ``path`` that fails (a full disk) as an ``OSError`` naming ``path``, which the CLI prints as
    one line. Why: torch's checkpoint writer reports a full disk as ``RuntimeError: ... unexpected pos 576 vs
    534``, safetensors' as a ``SafetensorError``, and a failed ``write()`` as an ``OSError`` without a file
    name. Other errors (and vrh's refusals) pass unchanged."""
    try:
        yield
    except OSError as e:
        if e.errno is None or e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e
    except Exception as e:  # noqa: BLE001 - re-raised unless it is a failed write
        if not (isinstance(e, RuntimeError) or type(e).__name__ == "SafetensorError"):
            raise
        text = str(e)
        full = "No space left" in text or "os error 28" in text or _free_bytes(path) < 1 << 20
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) from e
        if any(k in text for k in ("PytorchStreamWriter", "unexpected pos", "I/O error", "Error while serializing")):
            raise OSError(errno.EIO, f"could not write ({text.strip().splitlines()[0]})", str(path)) from e
        raise


def _free_bytes(path: Path) -> int:
    """Free bytes on the disk holding ``path`` (its nearest existing folder); a large number if unknown."""
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return 1 << 62


def _checkpoint_loader(trainer: Any):
    """What the trainer reloads a checkpoint's weights with. Why not its own: transformers 5.24's
    ``Trainer._load_from_checkpoint`` reads ``model.safetensors`` with a bare ``load_state_dict(strict=False)``,
    but ``save_pretrained`` writes LLaVA's and Qwen-VL's weights under their legacy key names, so not one
    weight matched and a resumed run silently continued from the base weights (with step-N optimizer state).
    ``from_pretrained`` maps the names back; the strict load then fails loudly on any mismatch."""

    def load(resume_from_checkpoint: str, model: Any = None) -> None:
        _load_weights(model if model is not None else trainer.model, resume_from_checkpoint)

    return load


def _load_weights(model: Any, folder: str | os.PathLike) -> None:
    """Load the weights ``save_pretrained`` wrote to ``folder`` into ``model`` (strict: see above)."""
    saved = type(model).from_pretrained(str(folder), dtype=model.dtype, trust_remote_code=False)
    model.load_state_dict(saved.state_dict())


def save_checkpoint_extras(policy: Any, model_dir: Path) -> None:
    """Make ``model_dir`` load like the base: its original processor (TRL saved the training copy) and the
    base checkpoint's adapter settings (:data:`SETTINGS_FILES`)."""
    policy.processor.save_pretrained(str(model_dir))
    base = Path(policy.path)
    for name in SETTINGS_FILES:
        if (base / name).is_file():
            shutil.copy2(base / name, model_dir / name)
    (model_dir / "training_args.bin").unlink(missing_ok=True)  # pickled TrainingArguments: not a model file


def _peak_rss() -> int:
    """This process's peak resident memory in bytes (Linux reports KiB, macOS bytes)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
