"""Peak memory of one DPO training step against an inference forward of the same batch (issue 28, item 4).

Each measurement runs in a fresh process (``spawn``), so that one's peak never hides in another's: the
process loads what its step needs (inference: the model; DPO: the policy and the reference), records its
memory, runs the step once and records the peak. On CUDA the figures are ``torch.cuda.max_memory_allocated``
(exact tensor bytes); on a CPU the process's peak resident set (``ru_maxrss``) minus its resident set after
loading, which also counts allocator slack and, when the step's peak stays under the load's own peak, reads
0 (:func:`step_memory` says which). The DPO step is one optimizer step of TRL's ``DPOTrainer`` (policy forward
and backward over chosen + rejected, reference forward, AdamW), the inference forward the policy's forward
over the same collated rows under ``no_grad``.

:func:`full_dpo_bytes` is the arithmetic for a larger model (weights, gradients, AdamW state, reference),
without activations; the measured ratio says what activations add on top for the organism only.

Re-measure with ``python -m vrh.experiments.dpo_memory --model organism --pairs RUN --pairs-per-step 4``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import tempfile
from typing import Any

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def full_dpo_bytes(n_params: float, dtype: str = "bfloat16", *, master_fp32: bool = True) -> dict[str, float]:
    """Bytes a full-parameter DPO step holds besides activations: the policy's weights and gradients in
    ``dtype``, AdamW's two fp32 moments, an fp32 master copy under mixed precision (``master_fp32``), and
    the reference's weights in ``dtype``.

    >>> {k: v / 1e9 for k, v in full_dpo_bytes(7e9).items()}  # doctest: +NORMALIZE_WHITESPACE
    {'weights': 14.0, 'gradients': 14.0, 'adam_moments': 56.0, 'master_weights': 28.0, 'reference': 14.0,
     'total': 126.0}
    """
    b = BYTES[dtype]
    parts = {"weights": n_params * b, "gradients": n_params * b, "adam_moments": n_params * 8,
             "master_weights": n_params * 4 if master_fp32 and b < 4 else 0.0, "reference": n_params * b}
    return {**parts, "total": sum(parts.values())}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _measure(mode: str, model: str, pairs: str, n_pairs: int, device: str, dtype: str, queue: Any) -> None:
    """Child process: load, mark, run one ``mode`` step ("inference" or "dpo"), report."""
    import gc

    import torch
    import trl.trainer.dpo_trainer  # noqa: F401 - imported before the mark: library code is not the step's memory

    from vrh.experiments import dpo
    from vrh.models.loading import load_model

    torch.set_num_threads(1)
    ds = dpo.load_pairs(pairs).select(range(n_pairs))
    policy = load_model(model, device=device, dtype=dtype)
    reference = load_model(model, device=device, dtype=dtype) if mode == "dpo" else None
    cuda = str(device).startswith("cuda")
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base, load_peak = _rss_bytes(), _peak_bytes()
    if mode == "inference":
        from trl.trainer.dpo_trainer import DataCollatorForVisionPreference

        proc = dpo.training_processor(policy.processor, policy.adapter)
        batch = DataCollatorForVisionPreference(proc)([dict(r) for r in ds])  # [2 * n_pairs, S]
        batch.pop("completion_mask")
        with torch.no_grad():
            policy.model(**{k: v.to(device) for k, v in batch.items()})
    else:
        from vrh.options import DpoTrainOptions

        opts = DpoTrainOptions(lr=1e-6, max_steps=1, train_batch_size=n_pairs, grad_accum=1, save_steps=10)
        with tempfile.TemporaryDirectory() as tmp:
            dpo.train_dpo(policy, reference, ds, tmp, opts, device=device, dtype=dtype)
    if cuda:
        peak = torch.cuda.max_memory_allocated() - base
        kind = "cuda max_memory_allocated - allocated after load"
    else:
        peak = max(0, _peak_bytes() - base)
        kind = "peak RSS - RSS after load" + (" (under the load's own peak: 0)" if _peak_bytes() <= load_peak else "")
    params = sum(p.numel() for p in policy.model.parameters())
    queue.put({"mode": mode, "bytes": int(peak), "kind": kind, "params": params, "rows": 2 * n_pairs,
               "loaded_bytes": int(base)})


def step_memory(model: str, pairs: str, *, n_pairs: int = 4, device: str = "cpu", dtype: str = "float32"
                ) -> dict[str, Any]:
    """Extra memory of one DPO step and of one inference forward over the same ``n_pairs`` pairs
    (``2 * n_pairs`` rows), each in its own process; their ratio; and the model's parameter count."""
    ctx = mp.get_context("spawn")
    out = {}
    for mode in ("inference", "dpo"):
        q = ctx.Queue()
        p = ctx.Process(target=_measure, args=(mode, model, pairs, n_pairs, device, dtype, q))
        p.start()
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"the {mode} memory measurement failed (exit code {p.exitcode})")
        out[mode] = q.get()
    ratio = out["dpo"]["bytes"] / out["inference"]["bytes"] if out["inference"]["bytes"] else None
    return {"inference": out["inference"], "dpo_step": out["dpo"], "ratio": ratio, "params": out["dpo"]["params"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vrh.experiments.dpo_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--pairs", required=True, help="dpo-pairs run folder")
    p.add_argument("--pairs-per-step", type=int, default=4)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=sorted(BYTES))
    a = p.parse_args(argv)
    res = step_memory(a.model, a.pairs, n_pairs=a.pairs_per_step, device=a.device, dtype=a.dtype)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
