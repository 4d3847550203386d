"""Out-of-memory handling shared by every loop that runs a model: tell an OOM from other errors, and retry a
batch that ran out of memory as two halves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from rich.text import Text

from vrh.infra.console import console

T = TypeVar("T")
R = TypeVar("R")


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an accelerator (or CPU allocator) out-of-memory error."""
    import torch

    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(err, oom)) or isinstance(err, MemoryError) \
        or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower())


def halving_on_oom(fn: Callable[[Sequence[T]], R], items: Sequence[T], what: str) -> list[R]:
    """``[fn(items)]``; when that runs out of memory, the same items as two halves, recursively (down to
    one item, which re-raises), and says so. Returns each piece's result, in order.

    Why: one long prompt (many visual tokens) can push a batch over the memory limit hours into a run;
    halving that batch keeps the run going with the same answers (greedy decoding does not depend on the
    batch's other rows)."""
    try:
        return [fn(items)]
    except (RuntimeError, MemoryError) as err:  # torch.cuda.OutOfMemoryError is a RuntimeError
        if not is_out_of_memory(err) or len(items) < 2:
            raise
    # outside the except block: the traceback (and the tensors it holds) is released before retrying
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    half = (len(items) + 1) // 2
    console.print(Text(f"{what}: out of memory on a batch of {len(items)}; retrying it as batches of {half} "
                       f"and {len(items) - half}", style="yellow"))
    return halving_on_oom(fn, items[:half], what) + halving_on_oom(fn, items[half:], what)
