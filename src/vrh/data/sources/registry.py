"""The benchmark-source registry (a leaf: imports nothing from :mod:`vrh.data.sources`).

A *source* reads one benchmark in its published local layout (a Hugging Face parquet snapshot, a CSV, a
JSON release) and turns each row into vrh :class:`~vrh.data.Sample` objects. It is two functions and a
description, registered once in its own module (a one-line registration, as adapters do):

* ``read_rows(src, split, options) -> Iterator[(key, row)]``: finds the split's files under ``src`` and
  yields raw rows lazily, with a per-row ``key`` (the benchmark's own id, or the row number). File-level
  problems (no such split, missing image files) are raised *before* the first row, so nothing is
  written; it must therefore do its checks eagerly and return an iterator, not be a generator itself.
* ``convert_row(key, row, ctx) -> list[Sample]``: one row's samples. A malformed row raises
  :class:`SkipRow` with a reason; :func:`vrh.data.sources.convert.convert` records it as a counted skip.
  A row outside the subset being converted raises :class:`NotInSubset` (counted apart, not a skip).

Why a leaf: source modules import this one to register, so it cannot import them back. Instead every
lookup first imports each module of the :mod:`vrh.data.sources` package (:func:`vrh.infra.discovery.discover`):
a new source is one file, and no import line or list names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh.infra.discovery import discover


class SkipRow(ValueError):
    """A row that cannot become a sample; the message is the reason written to ``skipped.jsonl``."""


class NotInSubset(Exception):
    """A sound row that the chosen subset does not include (SpatialRGPT's quantitative questions when the
    qualitative ones are converted); the message is the reason. Counted apart from skips: it says nothing
    about the file's health, so it never counts towards the conversion's skip rate."""


@dataclass(frozen=True)
class Skip:
    """One skipped row: the benchmark's id for it (or its row number) and why."""

    id: str
    reason: str


@dataclass(frozen=True)
class RowContext:
    """What ``convert_row`` gets besides the row: where images go and the conversion's settings."""

    source: str
    split: str
    images: Any  # vrh.data.sources.images.ImageStore (kept untyped: this module is a leaf)
    options: Mapping[str, Any]

    def sample_id(self, key: str, suffix: str = "") -> str:
        """``<source>-<split>-<key>[suffix]``: unique across benchmarks, so converted files can be merged."""
        return f"{self.source}-{self.split}-{key}{suffix}"


@dataclass(frozen=True)
class SourceOption:
    """One option of a source's own, which ``vrh data convert`` offers as ``--<name with dashes>``.

    ``help``: what it does for this source (the flag's help names each source that takes it). ``type``: the
    value's type (``bool``: a switch, set or not); ``choices``: the values allowed (the flag takes the union
    over the sources sharing the name; the source checks its own). A plain string in ``Source.options`` is an
    option with a string value and no help of its own.
    """

    name: str
    help: str = ""
    type: type = str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Source:
    """A registered benchmark source.

    ``splits``: the published splits, the default first. ``expected_rows``: rows per split as published
    (checked, and reported, when a whole split is converted). ``options``: the extra options
    ``convert_row`` / ``read_rows`` read from ``options`` (others are refused by name), each a
    :class:`SourceOption` or a plain name; ``vrh data convert`` builds its per-source flags from them.
    """

    name: str
    summary: str  # one line: the benchmark, the task and how answers are judged
    layout: str  # the expected local layout, shown by `vrh data list`
    task: str  # "grounding" | "vqa"
    splits: tuple[str, ...]
    read_rows: Callable[[Path, str, Mapping[str, Any]], Iterator[tuple[str, dict[str, Any]]]]
    convert_row: Callable[..., list]
    expected_rows: Mapping[str, int] = field(default_factory=dict)
    options: tuple[SourceOption | str, ...] = ()

    @property
    def default_split(self) -> str:
        return self.splits[0]

    @property
    def option_specs(self) -> tuple[SourceOption, ...]:
        """``options`` with each plain name as the string-valued :class:`SourceOption` it stands for."""
        return tuple(o if isinstance(o, SourceOption) else SourceOption(o) for o in self.options)

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.option_specs)


_SOURCES: dict[str, Source] = {}
_PACKAGE = __name__.rpartition(".")[0]  # vrh.data.sources: every module of it is imported before a lookup


def register_source(source: Source) -> Source:
    """Register ``source`` under its name; a second source of the same name is an error."""
    if source.name in _SOURCES:
        raise ValueError(f"source {source.name!r} is already registered")
    _SOURCES[source.name] = source
    return source


def get_source(name: str) -> Source:
    """The registered source ``name``; an unknown name is an error listing the known ones."""
    discover(_PACKAGE)
    try:
        return _SOURCES[name]
    except KeyError:
        raise ValueError(f"unknown data source {name!r}; known sources: {', '.join(source_names())} "
                         f"(see `vrh data list`)") from None


def source_names() -> tuple[str, ...]:
    """Registered source names, sorted."""
    discover(_PACKAGE)
    return tuple(sorted(_SOURCES))
