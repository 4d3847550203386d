"""Benchmark sources: each reads one benchmark in its published local layout and converts it to vrh's
JSONL format (``vrh data convert NAME SRC --out DIR``). One module per source, registered by name in
:mod:`vrh.data.sources.registry`, whose lookups import every module of this package first: a new source is
one file, and nothing here names it.

See ``docs/benchmarks.md`` for every source's layout, which field becomes what, and how it is judged.
"""

from vrh.data.sources.convert import ConversionFailed, ConvertReport, convert
from vrh.data.sources.registry import (NotInSubset, RowContext, Skip, SkipRow, Source, SourceOption, get_source,
                                       register_source, source_names)

__all__ = ["ConversionFailed", "ConvertReport", "NotInSubset", "RowContext", "Skip", "SkipRow", "Source", "SourceOption",
           "convert", "get_source", "register_source", "source_names"]
