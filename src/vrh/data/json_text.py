"""The JSON reader's old home: it is :mod:`vrh.infra.json_text` (one reader for every JSON vrh reads, below the
run-folder layer that needs it too); the names stay importable from here."""

from vrh.infra.json_text import MAX_DEPTH, kind, loads, problem, read_json

__all__ = ["MAX_DEPTH", "kind", "loads", "problem", "read_json"]
