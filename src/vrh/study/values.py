"""The values a study file's keys may take beyond their type: every bound a command would otherwise refuse
at run time (after datasets were prepared and models loaded, and without the study file's line), so that
``vrh study plan`` refuses it first, naming the line (:func:`vrh.study.spec._Reader.fail`). docs/study.md
lists the same bounds.

A rule is a function ``value -> problem | None``, keyed by key in :data:`RULES` (the ``[study]`` table, a
dataset entry) or in a cell kind's registration (its table's, :class:`vrh.study.cells.CellKind`); it sees a
value only when the study writes it (what is not written takes the default, which is valid).
"""

from __future__ import annotations

from typing import Any

from vrh.study.cells import Rule

# The synthetic world is drawn at about 200 samples a second and 14 KB a sample (PNG images; measured
# 2026-12 on this project's CPUs): 50,000 samples are ~0.7 GB and ~4 minutes, far beyond any benchmark the
# paper uses (RefCOCO val has 8,811), while n = 10^9 would write 14 TB.
MAX_WORLD_N = 50_000
WORLD_SAMPLE_BYTES = 14_000
SHOWN_CHARS = 60  # of a value quoted in a message: a huge list is not echoed whole


def shown(value: Any) -> str:
    """``repr(value)``, cut to :data:`SHOWN_CHARS` characters."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def at_least(lo: int) -> Rule:
    def rule(v: int) -> str | None:
        return None if v >= lo else f"must be >= {lo}, got {v}"
    return rule


def int_list(lo: int, empty: str) -> Rule:
    """A non-empty list of integers >= ``lo``; ``empty`` says why an empty list is refused."""
    def rule(v: list) -> str | None:
        if not v:
            return f"empty; {empty}"
        bad = next((x for x in v if isinstance(x, bool) or not isinstance(x, int) or x < lo), None)
        return None if bad is None else f"{shown(bad)} in {shown(v)}: each must be an integer >= {lo}"
    return rule


def str_list(empty: str) -> Rule:
    """A non-empty list of strings; ``empty`` says why an empty list is refused."""
    def rule(v: list) -> str | None:
        if not v:
            return f"empty; {empty}"
        bad = next((x for x in v if not isinstance(x, str)), None)
        return None if bad is None else f"{shown(bad)} in {shown(v)}: each must be a string"
    return rule


def name_list(what: str) -> Rule:
    """A non-empty list of names (left out, the table takes every one of the study's ``what``)."""
    return str_list(f"leave it out to use all of the study's {what}")


def device(v: str) -> str | None:
    """The form of a torch device (``cpu``, ``cuda``, ``cuda:1``, ``mps``). Whether this machine has it is
    checked by ``vrh study run`` where the cells run (:func:`vrh.study.checks.check_device_here`): a study
    may be planned on a machine without the GPU it will run on."""
    import torch

    try:
        torch.device(v)
    except (RuntimeError, TypeError, ValueError):
        return f"{shown(v)} is not a torch device (e.g. cpu, cuda, cuda:1, mps)"
    return None


def dtype(v: str) -> str | None:
    from vrh.options import DTYPES

    return None if v in DTYPES else f"{shown(v)}: one of {list(DTYPES)}"


def size_text(n_bytes: float) -> str:
    """A size in the unit that reads best.

    >>> size_text(14e12), size_text(7e8), size_text(14e3)
    ('14 TB', '700 MB', '14 kB')
    """
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n_bytes >= size:
            return f"{n_bytes / size:.3g} {unit}"
    return f"{n_bytes / 1e3:.3g} kB"


def world_size(v: int) -> str | None:
    if v < 1:
        return f"must be >= 1, got {v}"
    if v > MAX_WORLD_N:
        return (f"{v} samples would write about {size_text(v * WORLD_SAMPLE_BYTES)} of synthetic images; at most "
                f"{MAX_WORLD_N} (about {size_text(MAX_WORLD_N * WORLD_SAMPLE_BYTES)})")
    return None


def pairs(v: str | list) -> str | None:
    """``"auto"`` or a non-empty list of ``[A, B]`` with A != B (the names are checked against the study's
    models with its other names, :func:`vrh.study.checks.check_study`)."""
    if isinstance(v, str):
        return None if v == "auto" else f"\"auto\" or a list of [A, B] pairs, got {shown(v)}"
    if not v:
        return "empty; leave out [transfer] for no transfer cells, or write \"auto\""
    for pair in v:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            return f"{shown(pair)} is not a pair [A, B] of model names"
        if pair[0] == pair[1]:
            return f"{shown(pair)} pairs a model with itself; transfer masks A's heads in another model B"
    return None


POSITIVE, SEED = at_least(1), at_least(0)
SEEDS = int_list(0, "the random control needs at least one seed")
KS = int_list(0, "give at least one k")
MODELS, BENCHMARKS = name_list("models"), name_list("grounding benchmarks")

# the [study] table's and a dataset entry's; each protocol table's are its cell kind's (vrh.study.kinds)
RULES: dict[str, dict[str, Rule]] = {
    "study": {"batch_size": POSITIVE, "max_new_tokens": POSITIVE, "threads": POSITIVE, "device": device,
              "dtype": dtype},
    "dataset": {"n": world_size, "seed": SEED, "limit": POSITIVE},
}
