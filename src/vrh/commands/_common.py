"""What every command does the same way: load the model (or take the caller's) and set CPU threads.

Not a command (no ``NAME``); commands may import it, it imports no command.
"""

from __future__ import annotations

from typing import Any


def configure_threads(cfg: Any) -> int | None:
    """Apply ``--threads``; the default is one thread for the shipped organism on a CPU (tiny matmuls, and
    OpenMP's spin-waiting threads slow everything down on a busy machine), else torch's own choice."""
    import torch

    threads = getattr(cfg, "threads", None)
    if threads is None and str(getattr(cfg, "device", "cpu")).startswith("cpu") \
            and str(getattr(cfg, "model", "")).startswith("organism"):
        threads = 1
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    return threads


def load(cfg: Any, lm: Any = None, model: str | None = None):
    """The caller's loaded model, or ``cfg.model`` (or ``model``) loaded through its adapter."""
    if lm is not None:
        return lm
    from vrh.inference import load_model

    configure_threads(cfg)
    return load_model(model or cfg.model, device=cfg.device, dtype=cfg.dtype, adapter=getattr(cfg, "adapter", None))
