"""How a resumed run's config is compared with the one in its folder: every differing leaf named, in a line
each, a long value abbreviated between its items (a resume refusal, a study cell's stale settings)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

NOT_RECORDED = "(the family's own, not recorded)"


def as_recorded_now(old: dict[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """An interrupted run's config as today's vrh would have written it. A run started before ``model.answer_format``
    was recorded ran its family's own format (the ``native`` variant, vrh.models.answer_formats): it reads as that,
    so it resumes with the default and a resume with another variant is refused by name."""
    was, now = old.get("model"), new.get("model")
    if not (isinstance(was, Mapping) and isinstance(now, Mapping) and isinstance(now.get("answer_format"), Mapping)) \
            or "answer_format" in was:
        return old
    fmt = now["answer_format"]
    prompt = fmt.get("prompt") if fmt.get("name") == "native" else NOT_RECORDED  # the family's, whatever it is now
    return {**old, "model": {**was, "answer_format": {"name": "native", "prompt": prompt, "box": "native"}}}


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Human-readable differences between two JSON configs: ``"config.k: 3 -> 5"`` per differing leaf.

    Objects are compared key by key and lists of objects (the ``conditions``) item by item, so a difference
    names the one field that differs; a long value is abbreviated between its items, never inside one
    (:func:`short_json`).

    >>> config_differences({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": 0})
    ['b.c: 2 -> 3', 'd: (absent) -> 0']
    >>> config_differences({"conditions": [{"label": "none"}, {"label": "top_k", "heads": [[0, 1], [1, 2]]}]},
    ...                    {"conditions": [{"label": "none"}, {"label": "top_k", "heads": [[0, 1], [1, 3]]}]})
    ['conditions[1].heads: [[0, 1], [1, 2]] -> [[0, 1], [1, 3]]']
    """
    out = []
    for key in sorted(set(old) | set(new), key=str):
        out += _differences(old.get(key, _ABSENT), new.get(key, _ABSENT), f"{prefix}{key}")
    return out


_ABSENT = "(absent)"


def _differences(a: Any, b: Any, name: str) -> list[str]:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return config_differences(a, b, name + ".")
    records = lambda v: isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v)  # noqa: E731
    if records(a) and records(b):  # the conditions: item by item, extra items whole
        out = []
        for i in range(max(len(a), len(b))):
            out += _differences(a[i] if i < len(a) else _ABSENT, b[i] if i < len(b) else _ABSENT, f"{name}[{i}]")
        return out
    return [] if a == b else [f"{name}: {short_json(a)} -> {short_json(b)}"]


def short_json(value: Any, limit: int = 100) -> str:
    """``value`` as JSON (a string as itself) in about ``limit`` characters: a longer list or object keeps its
    first items whole and says how many it leaves out, a longer string its start and its length.

    >>> short_json([[0, 1], [2, 3], [4, 5]], limit=16)
    '[[0, 1], [2, 3], ... 1 more]'
    >>> short_json({"label": "top_k", "heads": [[0, 1]] * 30}, limit=40)
    '{"label": "top_k", ... 1 more}'
    >>> short_json("x" * 200, limit=20)
    'xxxxxxxxxxxxxxxxxxxx... (200 characters)'
    """
    if isinstance(value, str):  # as itself (a path, a model id, "(absent)")
        return value if len(value) <= limit else f"{value[:limit]}... ({len(value)} characters)"
    return _short(value, limit)


def _short(value: Any, limit: int) -> str:
    text = json.dumps(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        return f"{json.dumps(value[:limit] + '...')} ({len(value)} characters)"
    if isinstance(value, (list, Mapping)):
        pairs: list[tuple[Any, Any]] = list(value.items()) if isinstance(value, Mapping) else [(None, v) for v in value]

        def item(k: Any, v: Any, n: int) -> str:
            return _short(v, n) if k is None else f"{json.dumps(k)}: {_short(v, n)}"

        kept = [item(pairs[0][0], pairs[0][1], limit)]  # at least one item, itself abbreviated if it is long
        for k, v in pairs[1:]:
            whole = item(k, v, 10 ** 9)
            if len(", ".join(kept + [whole])) > limit:
                break
            kept.append(whole)
        o, c = ("{", "}") if isinstance(value, Mapping) else ("[", "]")
        more = f", ... {len(pairs) - len(kept)} more" if len(kept) < len(pairs) else ""
        return f"{o}{', '.join(kept)}{more}{c}"
    return text
