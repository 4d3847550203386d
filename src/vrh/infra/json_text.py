"""Every JSON vrh reads (a dataset line, a benchmark's annotation file, a run folder's config/results/head scores, a
checkpoint's config, a ``--variants`` file), read so that every way it can be bad is an error naming where, never
a traceback: :func:`read_json` for a file (size, depth and type bounds), :func:`loads` for a line.

Python's JSON parser recurses once per nesting level and gives up near ``sys.getrecursionlimit()`` levels
with a ``RecursionError``, which is not a ``ValueError``: a JSONL line of 100,000 ``[`` escaped every
``except ValueError`` (and a ``load_dataset(..., on_error="skip")``) as a traceback. Here too deep is a
:class:`json.JSONDecodeError` like any other malformed JSON, at the bracket that goes too deep, so each
caller's handling of bad JSON (file and line in the message, a counted skip) applies unchanged.

A dataset line (:func:`loads`) may nest at most :data:`MAX_DEPTH` levels: a value the parser can only just
read (990 levels on CPython 3.11) would be kept in ``Sample.meta`` and fail again wherever it is written back,
deeper in the stack. A whole file (:func:`read_json`) is refused only when the parser runs out of stack:
counting the levels of a 50 MB annotation file would cost over half as much as parsing it.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

MAX_DEPTH = 100  # levels of [ / { a dataset line may nest; real lines nest 2-4 (a box list in an object)

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a string (skipped whole: a bracket in it is text) or a bracket


def _past(text: str, depth: int) -> int | None:
    """The offset of the first bracket that opens level ``depth + 1``; None when ``text`` never nests deeper."""
    level = 0
    for m in _TOKEN.finditer(text):
        c = m.group()
        if c == "[" or c == "{":
            level += 1
            if level > depth:
                return m.start()
        elif c == "]" or c == "}":
            level -= 1
    return None


def loads(text: str, max_depth: int | None = MAX_DEPTH) -> Any:
    """``json.loads(text)``; nesting deeper than ``max_depth`` levels (None: deeper than the parser can read)
    is a :class:`json.JSONDecodeError` at the bracket that goes past the limit.

    >>> loads('{"box": [1, 2, 3, 4]}')
    {'box': [1, 2, 3, 4]}
    >>> loads('"[[["'), loads("[" * 100 + "]" * 100) is not None
    ('[[[', True)
    >>> loads("[" * 101 + "]" * 101)
    Traceback (most recent call last):
    ...
    json.decoder.JSONDecodeError: nested more than 100 levels deep: line 1 column 101 (char 100)
    """
    if max_depth is not None and text.count("[") + text.count("{") > max_depth:  # else it cannot be that deep
        at = _past(text, max_depth)
        if at is not None:
            raise json.JSONDecodeError(f"nested more than {max_depth} levels deep", text, at)
    try:
        return json.loads(text)
    except RecursionError:
        at = _past(text, MAX_DEPTH)
        raise json.JSONDecodeError(f"nested too deeply to read, past {MAX_DEPTH} levels", text, at or 0) from None


_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def problem(e: json.JSONDecodeError, unit: str = "line") -> str:
    r"""What is wrong at ``e``'s position, in a user's words (the caller adds where: ``e.colno``, ``e.lineno``).

    Python's own messages mislead at a line's end: a missing closing ``}`` reads "Expecting ',' delimiter",
    and a cut-off string "Invalid control character at" (the line's newline) with a dangling "at". ``unit``
    names the text parsed (a dataset ``line``, a ``file``). Parse a JSONL line without its line ending, so
    the position is on the line and a cut-off string is one.

    >>> def err(text):
    ...     try:
    ...         json.loads(text)
    ...     except json.JSONDecodeError as e:
    ...         print(f"column {e.colno}: {problem(e)}")
    >>> err('{"id": "a", "box": [1, 2, 3, 4]')
    column 32: the line ends before its JSON is complete: a closing '}' missing? (Expecting ',' delimiter)
    >>> err('{"id": "a", "image": "x.pn')
    column 22: the string that opens here is not closed before the line ends (a missing '"'?)
    >>> err('{"id": "a\tb"}')
    column 10: a raw control character (U+0009) inside a string: write it as \t
    >>> err('{"id": "a"} {"id": "b"}')
    column 13: text after the JSON value has ended (one record per line)
    """
    msg = e.msg
    if msg.startswith("Unterminated string"):
        return f'the string that opens here is not closed before the {unit} ends (a missing \'"\'?)'
    if msg.startswith("Invalid control character"):
        c = e.doc[e.pos]
        if c == "\n":
            return "a string runs past the end of its line (a missing '\"', or a raw line break: write it as \\n)"
        escaped = _ESCAPES.get(c) or "\\u%04x" % ord(c)
        return f"a raw control character (U+{ord(c):04X}) inside a string: write it as {escaped}"
    if msg.startswith("Extra data"):
        return "text after the JSON value has ended" + (" (one record per line)" if unit == "line" else "")
    if not e.doc[e.pos:].strip():  # the text ends where the parser wanted more
        closers = _still_open(e.doc)
        missing = f": a closing '{closers}' missing?" if closers else ""
        return f"the {unit} ends before its JSON is complete{missing} ({msg})"
    return msg.removesuffix(" at")


def _still_open(text: str) -> str:
    """The brackets that would close what ``text`` leaves open, innermost first (``'{"a": [1'`` -> ``']}'``)."""
    stack: list[str] = []
    for m in _TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            stack.append("]" if c == "[" else "}")
        elif c in "]}" and stack:
            stack.pop()
    return "".join(reversed(stack))


_KINDS = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
          bool: "true/false", type(None): "null"}


def kind(value: Any) -> str:
    """How JSON calls ``value``'s type, for messages (``{}`` -> ``an object``)."""
    return _KINDS.get(type(value), type(value).__name__)


def read_json(path: str | os.PathLike, *, max_bytes: int | None = None, max_depth: int | None = None,
              expect: type | None = None) -> Any:
    """A whole JSON file (UTF-8). Every way it can be bad is a ValueError naming the file: larger than
    ``max_bytes`` (checked before reading: nothing is allocated), not UTF-8, not JSON, nested deeper than
    ``max_depth`` levels (None: than the parser can read), or, given ``expect`` (``dict``, ``list``), a value of
    another type (``x.json is not valid JSON (Expecting value at line 3, column 9)``, ``results.json holds an
    array, not an object``). One BOM (what Windows tools write first) is skipped."""
    path = Path(path)
    if max_bytes is not None:
        size = path.stat().st_size
        if size > max_bytes:
            raise ValueError(f"{path} is {size:,} bytes, more than the {max_bytes:,} vrh reads of such a file; "
                             "it is not one vrh or a checkpoint writes")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path} is not UTF-8 (byte 0x{raw[e.start]:02x} on line {line}); JSON files must be "
                         "UTF-8") from None
    try:
        value = loads(text, max_depth=max_depth)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({problem(e, 'file')} at line {e.lineno}, column {e.colno})"
                         ) from None
    if expect is not None and not isinstance(value, expect):
        raise ValueError(f"{path} holds {kind(value)}, not {_KINDS.get(expect, expect.__name__)}")
    return value
