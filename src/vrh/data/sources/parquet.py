"""Rows of a Hugging Face parquet snapshot, read lazily with pyarrow (an optional dependency: the
``bench`` extra).

A snapshot is either one parquet file or a folder laid out as the hub stores it: ``data/<split>-*.parquet``
(``val-00000-of-00002.parquet``, ...), ``<split>-*.parquet`` at the top, or, for datasets with configs,
``<config>/<split>-*.parquet`` (pass the config's folder when there are several).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

BATCH_ROWS = 64  # rows decoded at a time: a RefCOCO row carries a whole COCO image


def _pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("reading parquet needs pyarrow: pip install 'vrh[bench]' (or pip install pyarrow)") from None
    return pq


def split_files(src: Path, split: str) -> list[Path]:
    """The parquet files of ``split`` under ``src`` (a file is taken as it is), sorted; an error naming
    the splits that are there when there is none."""
    src = Path(src)
    if src.is_file():
        return [src]
    if not src.is_dir():
        raise FileNotFoundError(f"no such file or folder: {src}")
    pattern = f"{split}-*.parquet"
    for folder in (src / "data", src):
        files = sorted(folder.glob(pattern))
        if files:
            return files
    files = sorted(src.rglob(pattern))
    folders = sorted({f.parent for f in files})
    if len(folders) > 1:
        raise ValueError(f"split {split!r} has parquet files in several folders under {src} "
                         f"({', '.join(str(f.relative_to(src)) for f in folders)}); pass the one to convert")
    if files:
        return files
    present = sorted({re.sub(r"-\d+(-of-\d+)?.*$", "", f.stem) for f in src.rglob("*.parquet")})
    raise ValueError(f"no parquet files for split {split!r} under {src} (looked for data/{pattern}, {pattern}); "
                     f"splits found: {', '.join(present) or 'none'} (choose one with --split)")


def parquet_rows(src: Path, split: str, columns: Sequence[str], key: str | None = None) -> Rows:
    """``(key, row)`` for every row of ``split`` under ``src``, one batch of rows decoded at a time.

    ``columns`` must all exist (an error naming the missing ones and the file's columns, raised before
    any row); ``key`` names the id column, else the key is the row's 0-based number in the split.
    """
    pq = _pyarrow_parquet()
    files = split_files(src, split)
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
