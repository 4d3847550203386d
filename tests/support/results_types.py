"""Does a results value hold what its annotations say? (:mod:`vrh.runs.results`: each field is annotated with
the JSON type vrh writes there; the reader keeps values as written, so only a test can hold the two together.)

:func:`mismatches` resolves a block's annotations with :func:`typing.get_type_hints` and checks every field's
value against its type, recursively through lists, dicts, unions and nested blocks. As in Python's typing an
``int`` is a ``float``, and a ``bool`` is neither (JSON ``true`` is no count).
"""

from __future__ import annotations

import types
import typing
from dataclasses import fields
from typing import Any

from vrh.runs.results import Block


def mismatches(value: Block, where: str = "") -> list[str]:
    """Every field of ``value`` (and of the blocks in it) whose value is not of its annotated type, as
    ``"path: value is not type"``; empty when all match. ``extra`` (the unknown keys) is not checked."""
    hints = typing.get_type_hints(type(value))
    out: list[str] = []
    for f in fields(value):
        if f.name != "extra":
            out += _check(getattr(value, f.name), hints[f.name], f"{where}.{f.name}" if where else f.name)
    return out


def untyped_fields(cls: type[Block]) -> list[str]:
    """The fields of ``cls`` annotated ``Any`` (or a union with it), ``extra`` aside."""
    hints = typing.get_type_hints(cls)
    return [f.name for f in fields(cls) if f.name != "extra"
            and (hints[f.name] is Any or Any in typing.get_args(hints[f.name]))]


def _check(value: Any, tp: Any, where: str) -> list[str]:
    if tp is Any:
        return []
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if any(not _check(value, a, where) for a in args):
            return []
        given = [a for a in args if a is not type(None)]
        if len(given) == 1:  # X | None and not None: what is wrong inside X
            return _check(value, given[0], where)
        return [f"{where}: {value!r:.80} is not {_name(tp)}"]
    if tp is type(None):
        ok = value is None
    elif origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r:.80} is not {_name(tp)}"]
        return [m for i, v in enumerate(value) for m in _check(v, args[0], f"{where}[{i}]")]
    elif origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r:.80} is not {_name(tp)}"]
        return [m for k, v in value.items()
                for m in [*_check(k, args[0], f"{where} key {k!r}"), *_check(v, args[1], f"{where}[{k!r}]")]]
    elif isinstance(tp, type) and issubclass(tp, Block):
        return mismatches(value, where) if isinstance(value, tp) else [f"{where}: {value!r:.80} is not {_name(tp)}"]
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(tp, type):
        ok = isinstance(value, tp)
    else:
        raise TypeError(f"{where}: no check for the annotation {tp!r}")
    return [] if ok else [f"{where}: {value!r:.80} is not {_name(tp)}"]


def _name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) and not typing.get_args(tp) else str(tp)
