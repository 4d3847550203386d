"""Data-parallel runs: several processes share one command's samples, and the run folder ends up as one
process would have written it.

Launch with an existing engine, nothing home-made::

    torchrun --nproc_per_node 4 -m vrh detect ...        # one machine, 4 processes
    accelerate launch --multi_gpu --num_processes 4 -m vrh sweep ...  # the same through accelerate

Both launchers set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``;
:func:`world` reads them and joins the process group on first use. A plain ``python -m vrh`` (or the
library in a notebook) is a world of one and touches no process group.

Design, and why:

* **The batch is the unit of work.** Global batch ``b`` is ``items[b * batch_size:(b + 1) * batch_size]``
  and rank ``r`` of ``w`` takes every batch with ``b % w == r`` (:meth:`World.owns`). Every sample is then
  computed in exactly the batch (same padding, same companions) it has in a one-process run, so the
  results are the same, not merely close; and a crash costs at most the batch in flight per rank.
* **Only small Python objects travel** (records, per-sample ``[L, H]`` maps), with ``all_gather_object``
  on gloo, which needs no GPU and serves GPU runs too: the tensors that matter never leave their device.
* **Files are per rank until the end**: each rank appends to ``samples.rank{r}-of-{w}.jsonl``
  (:func:`vrh.runs.shard_name`); rank 0 merges them into ``samples.jsonl`` before ``results.json``.
  The run folder must be on a filesystem every rank sees (one machine, or a shared disk across nodes).

The process group is destroyed at interpreter exit (:func:`shutdown`): without it, roughly one run in ten
aborted at teardown.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import Any

ENV_WORLD_SIZE = "WORLD_SIZE"


@dataclass(frozen=True)
class World:
    """This process's place among the processes of one run (rank 0 of 1 when not launched in parallel)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def owns(self, batch_index: int) -> bool:
        """Whether global batch ``batch_index`` is this rank's (strided: rank r takes r, r + w, ...)."""
        return batch_index % self.size == self.rank

    def barrier(self) -> None:
        if self.active:
            import torch.distributed as dist

            dist.barrier()

    def all_gather(self, obj: Any) -> list[Any]:
        """``obj`` of every rank, in rank order (``[obj]`` in a world of one)."""
        if not self.active:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out


_WORLD: World | None = None


def world() -> World:
    """The world of this process, joining the launcher's process group on first call.

    A ``WORLD_SIZE`` above 1 without the rest of the launcher's variables fails in
    ``init_process_group``, naming what is missing."""
    global _WORLD
    if _WORLD is not None:
        return _WORLD
    size = int(os.environ.get(ENV_WORLD_SIZE, "1") or 1)
    if size <= 1:
        _WORLD = World()
        return _WORLD
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
        atexit.register(shutdown)
    _WORLD = World(rank=dist.get_rank(), size=dist.get_world_size(),
                   local_rank=int(os.environ.get("LOCAL_RANK", "0") or 0))
    return _WORLD


def shutdown() -> None:
    """Leave the process group (registered at exit by :func:`world`; safe to call twice)."""
    global _WORLD
    _WORLD = None
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed support
        return
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_device(device: str, w: World | None = None) -> str:
    """``cuda`` -> ``cuda:<local rank>`` in a parallel run (one GPU per process); anything else as given."""
    w = w or world()
    if w.active and device == "cuda":
        return f"cuda:{w.local_rank}"
    return device


def my_batches(n_items: int, batch_size: int, w: World | None = None) -> list[tuple[int, int, int]]:
    """``(batch index, start, stop)`` of this rank's global batches over ``n_items``.

    >>> my_batches(10, 4, World(rank=1, size=2))
    [(1, 4, 8)]
    >>> my_batches(10, 4, World())
    [(0, 0, 4), (1, 4, 8), (2, 8, 10)]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    w = w or world()
    return [(b, s, min(s + batch_size, n_items)) for b, s in enumerate(range(0, n_items, batch_size)) if w.owns(b)]
