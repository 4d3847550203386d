"""Rows of a Hugging Face parquet snapshot, read lazily with pyarrow (an optional dependency: the
``bench`` extra).

A snapshot is either one parquet file or a folder laid out as the hub stores it. A file holds split ``S``
when it is named ``S.parquet`` or ``S-<shard>.parquet`` (``val-00000-of-00002.parquet``); it is looked
for in ``data/``, then at the top, then in exactly one subfolder (a dataset's config, e.g.
``L1_single/``; pass the config's folder when there are several). A source whose split is stored under
other names says so with ``layouts`` (CV-Bench's ``test`` is ``test.parquet`` or ``test_2d`` +
``test_3d``; MMStar's ``val`` is ``mmstar.parquet``). The error for a split that is not there lists the
splits that are, and each of them is accepted as ``--split``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

BATCH_ROWS = 64  # rows decoded at a time: a RefCOCO row carries a whole COCO image

Layouts = Mapping[str, Sequence[Sequence[str]]]  # split -> alternative groups of file splits that hold it


def _pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("reading parquet needs pyarrow: pip install 'vrh[bench]' (or pip install pyarrow)") from None
    return pq


def file_split(path: Path) -> str:
    """The split a parquet file holds, by the hub's naming.

    >>> [file_split(Path(n)) for n in ("val-00000-of-00002.parquet", "test_2d.parquet", "mmstar.parquet")]
    ['val', 'test_2d', 'mmstar']
    """
    return re.sub(r"-\d+(-of-\d+)?.*$", "", path.stem)


def _holds(path: Path, split: str) -> bool:
    return path.stem == split or path.stem.startswith(split + "-")


def _files_of(src: Path, split: str) -> list[Path]:
    """The files holding ``split``: in ``data/``, else at the top, else in one subfolder ([] if none)."""
    for folder in (src / "data", src):
        files = sorted(f for f in folder.glob("*.parquet") if _holds(f, split))
        if files:
            return files
    files = sorted(f for f in src.rglob("*.parquet") if _holds(f, split))
    folders = sorted({f.parent for f in files})
    if len(folders) > 1:
        raise ValueError(f"split {split!r} has parquet files in several folders under {src} "
                         f"({', '.join(str(f.relative_to(src)) for f in folders)}); pass the one to convert")
    return files


def _group_files(src: Path, group: Sequence[str]) -> list[Path] | None:
    found = [_files_of(src, name) for name in group]
    return [f for files in found for f in files] if all(found) else None


def split_files(src: Path, split: str, layouts: Layouts | None = None) -> list[Path]:
    """The parquet files of ``split`` under ``src`` (a file is taken as it is), in order; an error naming
    the splits that are there when there is none. ``layouts[split]``: the groups of file splits that may
    hold ``split``, tried in order, the first whose every member has files winning (default: ``split``)."""
    src = Path(src)
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise FileNotFoundError(f"no such file or folder: {src}")
    layouts = layouts or {}
    groups = layouts.get(split) or ((split,),)
    for group in groups:
        files = _group_files(src, group)
        if files:
            return files
    present = {file_split(f) for f in src.rglob("*.parquet")}
    present |= {name for name, alternatives in layouts.items() if any(_group_files(src, g) for g in alternatives)}
    looked = " or ".join(" + ".join(group) for group in groups)
    raise ValueError(f"no parquet files for split {split!r} under {src} (looked for {looked}: <name>.parquet or "
                     f"<name>-*.parquet in data/, the top or one subfolder); splits found: "
                     f"{', '.join(sorted(present)) or 'none'} (choose one with --split)")


def parquet_rows(src: Path, split: str, columns: Sequence[str], key: str | None = None,
                 layouts: Layouts | None = None) -> Rows:
    """``(key, row)`` for every row of ``split`` under ``src``, one batch of rows decoded at a time.

    ``columns`` must all exist (an error naming the missing ones and the file's columns, raised before
    any row); ``key`` names the id column, else the key is the row's 0-based number in the split;
    ``layouts`` as for :func:`split_files`.
    """
    pq = _pyarrow_parquet()
    files = split_files(src, split, layouts)
    for f in files:
        names = pq.ParquetFile(f).schema_arrow.names
        missing = [c for c in columns if c not in names]
        if missing:
            raise ValueError(f"{f} lacks column(s) {missing}; its columns: {names}. Is it the right benchmark?")
    return Rows(pq, files, key, total=sum(pq.ParquetFile(f).metadata.num_rows for f in files))


class Rows:
    """An iterator over ``(key, row)`` that also knows how many rows there are (``total``, from the
    parquet footers), so the conversion can show a progress bar."""

    def __init__(self, pq, files: list[Path], key: str | None, total: int):
        self.total = total
        self._it = self._rows(pq, files, key)

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        return self._it

    def __next__(self) -> tuple[str, dict[str, Any]]:
        return next(self._it)

    @staticmethod
    def _rows(pq, files: list[Path], key: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
        n = 0
        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS):
                for row in batch.to_pylist():
                    k = row.get(key) if key else None
                    yield (str(n) if k is None else str(k)), row
                    n += 1
