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
  to ``OUT/train_log.jsonl`` as it comes and printed as one line.
* **Resumable**: TRL checkpoints go to ``OUT/checkpoints`` every ``save_steps`` steps (the last one kept);
  ``resume`` continues from the newest, its weights reloaded through ``from_pretrained``
  (:func:`_checkpoint_loader`: the Trainer's own reload loads none of them for these families). They are
  deleted once the model is saved (optimizer state is 2x the weights: never left in a tree).

TRL refuses ``precompute_ref_log_probs`` for vision data, so the reference runs every step (the memory it
needs is measured by :func:`vrh.experiments.dpo_memory.step_memory`). ``max_length=None``: truncation
could cut image tokens.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh import runs
from vrh.infra.console import console

MODEL_DIR = "model"  # the trained checkpoint, inside a dpo-train run folder
CHECKPOINTS = "checkpoints"  # TRL's resumable checkpoints while training runs
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


def latest_checkpoint(folder: str | os.PathLike) -> str | None:
    """The newest TRL checkpoint under ``folder`` (``checkpoint-<step>``), or None."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(folder)) if Path(folder).is_dir() else None


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


def _log_callback(path: Path):
    from transformers import TrainerCallback

    class LogToFile(TrainerCallback):
        """Each TRL log record appended to ``train_log.jsonl`` (flushed: a crash keeps what was logged) and
        printed as one line."""

        def on_log(self, args, state, control, logs=None, **kw):
            rec = {"step": state.global_step, "epoch": state.epoch, **(logs or {})}
            with open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")
            shown = " ".join(f"{k.split('/')[-1]} {rec[k]:.4g}" for k in LOG_KEYS if isinstance(rec.get(k), float))
            if shown:  # the end-of-training summary record has none of them
                console.print(f"dpo step {state.global_step}/{state.max_steps}: {shown}")

    return LogToFile()


def dpo_config(opts: Any, output_dir: str | os.PathLike, *, device: str, dtype: str):
    """TRL's ``DPOConfig`` from vrh's options (:class:`vrh.infra.options.DpoTrainOptions`)."""
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
    """DPO-train ``policy`` (a :class:`vrh.models.loading.LoadedModel`, trained in place) against
    ``reference`` (another load of the same checkpoint, never trained) on ``dataset`` (:func:`load_pairs`);
    writes ``out/model`` (the checkpoint), ``out/train_log.jsonl`` and, while running, ``out/checkpoints``.
    ``resume`` continues from the newest checkpoint there (none: from the start)."""
    import torch
    from transformers import PrinterCallback
    from trl import DPOTrainer

    if policy.model is reference.model:
        raise ValueError("the policy and the reference must be two loads of the model (DPO trains the policy)")
    out = Path(out)
    ckpt_dir, model_dir, log = out / CHECKPOINTS, out / MODEL_DIR, out / TRAIN_LOG
    resumed = latest_checkpoint(ckpt_dir) if resume else None
    if resumed is None:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        log.unlink(missing_ok=True)
    t0 = time.time()
    cuda = str(device).startswith("cuda") and torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with warnings.catch_warnings():
        # TRL 1.16 calls transformers 5's deprecated gradient_checkpointing names on every step: not the user's to fix
        warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.*deprecated", category=FutureWarning)
        trainer = DPOTrainer(model=policy.model, ref_model=reference.model, train_dataset=dataset,
                             args=dpo_config(opts, ckpt_dir, device=device, dtype=dtype),
                             processing_class=training_processor(policy.processor, policy.adapter),
                             callbacks=[_log_callback(log)])
        trainer.remove_callback(PrinterCallback)  # transformers' raw dict per log: ours prints one line instead
        trainer._load_from_checkpoint = _checkpoint_loader(trainer)
        result = trainer.train(resume_from_checkpoint=resumed)
    peak = torch.cuda.max_memory_allocated() if cuda else _peak_rss()
    trainer.save_model(str(model_dir))
    save_checkpoint_extras(policy, model_dir)
    shutil.rmtree(ckpt_dir, ignore_errors=True)  # resumable state is only needed until the model is saved
    records = runs.read_jsonl(log) if log.is_file() else []
    per_step = {r["step"]: r for r in records if "loss" in r}  # a step redone after a resume: its last record
    last = per_step[max(per_step)] if per_step else {}
    # the mean over every step's logged loss: the Trainer's own training_loss covers only a resumed run's part
    mean_loss = sum(r["loss"] for r in per_step.values()) / len(per_step) if per_step else float(result.training_loss)
    policy.model.eval()
    return TrainOutcome(steps=int(result.global_step), epochs=float(trainer.state.epoch or 0.0),
                        train_loss=mean_loss, last_log=last, resumed_from=resumed,
                        model_dir=str(model_dir), seconds=time.time() - t0, peak_memory_bytes=peak,
                        peak_memory_kind="cuda max_memory_allocated" if cuda else "process peak RSS")


def _checkpoint_loader(trainer: Any):
    """What the trainer reloads a checkpoint's weights with. Why not its own: transformers 5.24's
    ``Trainer._load_from_checkpoint`` reads ``model.safetensors`` with a bare ``load_state_dict(strict=False)``,
    but ``save_pretrained`` writes LLaVA's and Qwen-VL's weights under their legacy key names, so not one
    weight matched and a resumed run silently continued from the base weights (with step-N optimizer state).
    ``from_pretrained`` maps the names back; the strict load then fails loudly on any mismatch."""

    def load(resume_from_checkpoint: str, model: Any = None) -> None:
        model = model if model is not None else trainer.model
        saved = type(model).from_pretrained(resume_from_checkpoint, dtype=model.dtype)
        model.load_state_dict(saved.state_dict())

    return load


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
