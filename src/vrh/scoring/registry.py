"""The scorer registry: method names and their options -> scorer instances (a leaf: imports nothing of
vrh.scoring, only the discovery helper).

Why a leaf: every scoring method registers itself here from its own file (one decorator), and the
detection loop asks for scorers by spec string. If this module imported the methods, the methods (which
import it to register) would import it back -- an import cycle. Instead every lookup first imports each
module of the :mod:`vrh.scoring` package (:func:`vrh.infra.discovery.discover`), so a new method is one
file and nothing names it; importing the registry alone imports no scorer (nor torch). Methods are listed
sorted by name, whatever order their files were imported in.

A *spec* names one configured scorer: ``NAME[:KEY=VALUE[:KEY=VALUE...]]``. ``:`` separates options
because ``,`` separates scorers on the command line, e.g. ``qrhead:calibrate=false`` or
``out/sum/freq:m=10``. Each method declares its options (:class:`Option`: name, type, default, one-line
help); values are parsed from text by type (int, float, bool, str). Names and keys are case-insensitive.
A scorer's ``.name`` is its canonical spec: the method's canonical name plus the options whose value
differs from the default in effect, sorted by key -- so two specs of one method get different names, and
``make_scorer(sc.name, **defaults)`` rebuilds ``sc``. ``sc.options`` holds every declared option's value in
effect (defaults included), for a run to record which variant ran. For the five prior methods every default
is the authors' reference implementation (docs/baselines.md), so a bare name is the reference variant.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vrh.infra.discovery import discover

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_TYPES: dict[type, str] = {int: "int", float: "float", bool: "bool", str: "str"}


@dataclass(frozen=True)
class Option:
    """One option of a scoring method: reachable as ``NAME:key=value`` and as ``make_scorer(..., key=value)``.

    >>> Option("m", int, 20, "top-m per sample").parse("10"), Option("calibrate", bool, True, "").parse("False")
    (10, False)
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.type not in _TYPES:
            raise TypeError(f"option {self.name!r}: type must be one of {sorted(_TYPES.values())}, got {self.type!r}")
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", self.name):
            raise ValueError(f"option name {self.name!r} must be lower-case letters, digits and underscores")
        self.check(self.default)

    def check(self, value: Any) -> Any:
        """``value`` if it fits the option's type and choices (an int is accepted for a float), else ValueError."""
        if self.type is bool:
            ok = isinstance(value, bool)
        elif self.type is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:  # bool is an int subclass: True is not a valid m
            ok = isinstance(value, self.type) and not isinstance(value, bool)
        if not ok:
            raise ValueError(f"option {self.name!r} must be {_TYPES[self.type]}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"option {self.name!r} must be one of {', '.join(self.choices)}, got {value!r}")
        return float(value) if self.type is float else value

    def parse(self, text: str) -> Any:
        """The value of ``text`` (a spec's VALUE) with this option's type; ValueError names the option."""
        raw = str(text).strip()
        try:
            if self.type is bool:
                if raw.lower() not in _TRUE + _FALSE:
                    raise ValueError
                value: Any = raw.lower() in _TRUE
            else:
                value = self.type(raw.lower() if self.choices is not None else raw)
        except ValueError:
            raise ValueError(f"bad value {text!r} for option {self.name!r}: expected {_TYPES[self.type]}"
                             + (" (true/false)" if self.type is bool else "")) from None
        return self.check(value)

    def format(self, value: Any) -> str:
        """``value`` as spec text (``parse(format(v)) == v``)."""
        return ("true" if value else "false") if self.type is bool else str(value)

    def describe(self) -> dict[str, Any]:
        out = {"type": _TYPES[self.type], "default": self.default, "help": self.help}
        return {**out, "choices": list(self.choices)} if self.choices is not None else out


@dataclass(frozen=True)
class Method:
    """A registered scoring method. ``factory(**options)`` builds a scorer; a *pattern* method (one name
    grammar for a family, e.g. ``QUERY/PHI/OMEGA``) gets the base name first: ``factory(base, **options)``,
    and ``canonical(base)`` gives its canonical spelling (and raises ValueError for a bad one)."""

    name: str
    factory: Callable[..., Any]
    options: tuple[Option, ...]
    help: str
    pattern: re.Pattern[str] | None = None
    canonical: Callable[[str], str] | None = None
    names: tuple[str, ...] = ()  # the concrete names a pattern method lists in scorer_names()
    compare_order: int | None = None  # its place among `vrh compare`'s default prior methods; None: not there

    def option(self, key: str) -> Option:
        for opt in self.options:
            if opt.name == key:
                return opt
        have = ", ".join(f"{o.name} (default {o.format(o.default)})" for o in self.options) or "none"
        raise ValueError(f"unknown option {key!r} for scorer {self.name!r}; its options: {have}")


_METHODS: dict[str, Method] = {}
_PACKAGE = __name__.rpartition(".")[0]  # vrh.scoring: every module of it is imported before a lookup


def _methods() -> list[Method]:
    """Every registered method, sorted by name, once every module of the package has been imported."""
    discover(_PACKAGE)
    return [_METHODS[k] for k in sorted(_METHODS)]


def register_scorer(name: str, *, options: tuple[Option, ...] = (), help: str = "", pattern: str | None = None,
                    canonical: Callable[[str], str] | None = None, names: tuple[str, ...] = (),
                    compare_order: int | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a scorer factory (a class or function) under ``name``; use as a decorator or call it.

    With ``pattern`` (a regex the lower-cased base name must fully match), ``name`` is the grammar shown to
    users (e.g. ``"QUERY/PHI/OMEGA"``), the factory receives the base name as its first argument, and
    ``canonical`` normalises it; ``names`` lists the concrete names. ``compare_order``: the method is one of
    the prior methods ``vrh compare`` runs by default (:func:`compare_baselines`), at this place (ascending;
    the built-ins follow the paper's Tab. A9). A name registered twice is an error (two files claiming one
    method would drift apart). Returns the factory unchanged.
    """
    key = str(name).strip() if pattern is not None else str(name).strip().lower()
    if not key or ":" in key or "," in key:
        raise ValueError(f"scorer name {name!r} must be non-empty without ':' or ','")
    seen: set[str] = set()
    for opt in options:
        if opt.name in seen:
            raise ValueError(f"scorer {key!r} declares option {opt.name!r} twice")
        seen.add(opt.name)

    def add(factory: Callable[..., Any]) -> Callable[..., Any]:
        if key in _METHODS:
            raise ValueError(f"scorer {key!r} is already registered (by {_METHODS[key].factory!r})")
        _METHODS[key] = Method(key, factory, tuple(options), help, re.compile(pattern) if pattern else None,
                               canonical, tuple(names), compare_order)
        return factory

    return add


def _lookup(base: str) -> tuple[Method, str]:
    """The method a base name belongs to and the base's canonical spelling."""
    methods = _methods()
    if base in _METHODS and _METHODS[base].pattern is None:
        return _METHODS[base], base
    for method in methods:
        if method.pattern is not None and method.pattern.fullmatch(base):
            return method, (method.canonical(base) if method.canonical else base)
    raise ValueError(f"unknown scorer {base!r}; registered: {', '.join(m.name for m in methods)}")


def parse_spec(spec: str) -> tuple[Method, str, dict[str, Any]]:
    """``(method, canonical base name, {key: value})`` of a spec ``NAME[:KEY=VALUE...]``.

    >>> method, base, opts = parse_spec(" OUT/Sum/avg : m = 10 ")
    >>> method.name, base, opts
    ('QUERY/PHI/OMEGA', 'out/sum/mean', {'m': 10})
    """
    base, *parts = [p.strip() for p in str(spec).split(":")]
    if not base:
        raise ValueError(f"bad scorer spec {spec!r}: expected NAME[:KEY=VALUE...], e.g. 'qrhead:calibrate=false'")
    method, canon = _lookup(base.lower())
    given: dict[str, Any] = {}
    for part in parts:
        key, eq, text = part.partition("=")
        key = key.strip().lower()
        if not eq or not key:
            raise ValueError(f"bad option {part!r} in scorer spec {spec!r}: expected KEY=VALUE")
        if key in given:
            raise ValueError(f"option {key!r} given twice in scorer spec {spec!r}")
        given[key] = method.option(key).parse(text)
    return method, canon, given


def make_scorer(spec: str, **defaults: Any) -> Any:
    """A fresh scorer for ``spec`` (see the module docstring); ``.name`` is set to its canonical spec.

    ``defaults`` are run-wide settings (detection passes ``seed``): each applies to the methods that
    declare that option and the spec's own options override it; one that no registered method declares
    is a typo and raises ValueError.

    >>> sc = make_scorer("qrhead:calibrate=false:outlier_z=2")
    >>> sc.name, sc.calibrate, sc.extra_passes, make_scorer("rand1/sum/mean", seed=3).seed
    ('qrhead:calibrate=false', False, (), 3)
    """
    method, base, given = parse_spec(spec)
    known = {o.name for m in _methods() for o in m.options}
    unknown = sorted(set(defaults) - known)
    if unknown:
        raise ValueError(f"unknown scorer option(s) {unknown}; registered options: {sorted(known)}")
    declared = {o.name: o for o in method.options}
    effective = {k: declared[k].check(v) for k, v in defaults.items() if k in declared}
    values = {**effective, **given}
    scorer = method.factory(base, **values) if method.pattern is not None else method.factory(**values)
    changed = sorted(k for k, v in given.items() if v != effective.get(k, declared[k].default))
    scorer.name = base + "".join(f":{k}={declared[k].format(given[k])}" for k in changed)
    # every option's value in effect, defaults included: what a run records as "the variant that ran"
    scorer.options = {o.name: values.get(o.name, o.default) for o in method.options}
    return scorer


def scorer_names() -> tuple[str, ...]:
    """Every method name, methods sorted by name (a pattern method contributes its concrete names)."""
    return tuple(n for m in _methods() for n in (m.names if m.pattern is not None else (m.name,)))


def describe_scorers() -> dict[str, dict[str, Any]]:
    """``{method: {"help": str, "options": {key: {"type", "default", "help"[, "choices"]}}}}`` for help/docs."""
    return {m.name: {"help": m.help, "options": {o.name: o.describe() for o in m.options}} for m in _methods()}


def compare_baselines() -> tuple[str, ...]:
    """The prior methods ``vrh compare`` runs by default: every method registered with a ``compare_order``,
    in that order (ties by name).

    >>> compare_baselines()[:2]
    ('retrieval_heads', 'qrhead')
    """
    chosen = [m for m in _methods() if m.compare_order is not None]
    return tuple(m.name for m in sorted(chosen, key=lambda m: m.compare_order))
