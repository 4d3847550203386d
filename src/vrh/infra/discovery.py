"""Extensions found by their files: a registry imports every module of its package before it answers, so a
scorer, a task, a benchmark source or an answer rule is one file that registers itself (a decorator or a
``register_*`` call), and no import line or list elsewhere names it (the adapters' shape).

Why on lookup and not when the package is imported: importing a registry must stay cheap (``vrh --help``
and the report read registries without importing torch, which the scorer files need), and a lookup is the
first moment the registry has to be complete.

The package's ``__path__`` is read on every call and each path is scanned once per process: a file added
to the package's folder is found by the next process, and a folder added to ``__path__`` (a namespace, a
test's temporary extension) by the next lookup.
"""

from __future__ import annotations

import importlib
import pkgutil

_SCANNED: set[tuple[str, tuple[str, ...]]] = set()
_SCANNING: set[str] = set()


def discover(package: str) -> None:
    """Import every public module of ``package`` (names not starting with ``_``), in name order.

    A module that looks a registry up while it is being imported sees what has registered so far (the
    package is being scanned: no second scan starts). A module that fails to import raises here, and the
    next lookup tries again.

    >>> discover("vrh.tasks"); import sys; "vrh.tasks.grounding" in sys.modules
    True
    """
    pkg = importlib.import_module(package)
    key = (package, tuple(pkg.__path__))
    if key in _SCANNED or package in _SCANNING:
        return
    _SCANNING.add(package)
    try:
        for name in sorted({m.name for m in pkgutil.iter_modules(pkg.__path__)}):
            if not name.startswith("_"):
                importlib.import_module(f"{package}.{name}")
        _SCANNED.add(key)
    finally:
        _SCANNING.discard(package)
