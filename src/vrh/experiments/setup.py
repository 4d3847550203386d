"""What every run does the same way before it measures: refuse an ``--out`` the run folder would refuse,
refuse a data-parallel launch the run does not support, set the CPU threads, and load the model (or take the
caller's). The library calls of :mod:`vrh.experiments.settings`' values go through :func:`load`, so a
command and a study cell load alike.
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


def check_data_parallel(cfg: Any) -> None:
    """Under torchrun / accelerate (more than one process), refuse a run that does not shard its work.

    A settings type declares ``DATA_PARALLEL = True`` when its run splits its samples across ranks and rank 0
    merges the run folder (:mod:`vrh.infra.distributed`); any other run would go whole on every rank and
    write the same folder from several processes."""
    from vrh.infra.distributed import world

    w = world()
    if not w.active:
        return
    if not getattr(type(cfg), "DATA_PARALLEL", False):
        name = getattr(type(cfg), "COMMAND", type(cfg).__name__)
        raise ValueError(f"vrh {name} does not run data-parallel (launched as {w.size} processes); run it as one "
                         "process, or use detect, evaluate or sweep under torchrun / accelerate launch")


def check_out(cfg: Any) -> None:
    """Refuse ``cfg.out`` now when the run folder would refuse it later (non-empty without --overwrite or
    --resume, not a vrh run, a file): before the model loads, which takes minutes on a 7B."""
    from vrh.runs.folder import check_out as check

    if getattr(cfg, "out", None) is not None:
        check(cfg.out, resume=getattr(cfg, "resume", False), overwrite=getattr(cfg, "overwrite", False))


def load(cfg: Any, lm: Any = None, model: str | None = None):
    """The caller's loaded model, or ``cfg.model`` (or ``model``) loaded through its adapter, after
    :func:`check_out`, answering in ``cfg.answer_format`` (the family's first when None); says on stderr which
    model runs (its adapter, head grid and answer format).

    In a data-parallel run a run that does not support it is refused here (every model-loading run passes
    through), and ``--device cuda`` means this rank's GPU."""
    check_data_parallel(cfg)
    check_out(cfg)
    answer_format = getattr(cfg, "answer_format", None)
    if lm is not None:  # the run's own answer format (a study's cached model may come from another cell)
        return lm.with_answer_format(answer_format) if hasattr(lm, "with_answer_format") else lm
    from vrh.infra.console import console
    from vrh.infra.distributed import rank_device, world
    from vrh.models.loading import load_model

    configure_threads(cfg)
    lm = load_model(model or cfg.model, device=rank_device(cfg.device), dtype=cfg.dtype,
                    adapter=getattr(cfg, "adapter", None), device_map=getattr(cfg, "device_map", None),
                    answer_format=answer_format)
    if world().is_main:  # once per run, not once per data-parallel process
        console.print(f"model: {lm.path} (adapter {lm.adapter.name}, {lm.num_layers} layers x {lm.num_heads} heads, "
                      f"answer format {lm.adapter.answer_format.name})", markup=False, highlight=False)
    return lm


def fit_random_pool(cfg: Any, lm: Any) -> Any:
    """``cfg`` with ``exclude_layers`` completed for ``lm``'s random controls: under ``--random-from visual`` (the
    default) a cross-attention model's self-attention layers join it, since their heads never see the image (a
    control drawn from them would be a weaker control than the detected cross-attention heads). Returned
    unchanged for a model without cross-attention layers, for ``--random-from all`` and for settings without
    the option; the completed value is what ``config.json`` records."""
    import dataclasses

    from vrh.core.layout import cross_layers

    if getattr(cfg, "random_from", "all") != "visual":
        return cfg
    cross = cross_layers(lm.adapter, lm.model)
    if not cross:
        return cfg
    others = [layer for layer in range(lm.num_layers) if layer not in cross]
    return dataclasses.replace(cfg, exclude_layers=tuple(sorted({*cfg.exclude_layers, *others})))
