"""Extensions found by their files: a registry imports every module of its package before it answers, so a
scorer, a task, a benchmark source or an answer rule is one file that registers itself (a decorator or a
``register_*`` call), and no import line or list elsewhere names it (the adapters' shape).

Why on lookup and not when the package is imported: importing a registry must stay cheap (``vrh --help``
and the report read registries without importing torch, which the scorer files need), and a lookup is the
first moment the registry has to be complete.

The package's ``__path__`` is read on every call and each path is scanned once per process: a file added
to the package's folder is found by the next process, and a folder added to ``__path__`` (a namespace, a
test's temporary extension) by the next lookup.

A user's extension outside vrh's folders is imported the same way, after the package's own modules
(:func:`load_user_plugins`): a module of an installed package named under the ``vrh.plugins`` entry-point group
(``[project.entry-points."vrh.plugins"] mine = "mypkg.box_peak"``), and each module name or ``.py`` file in the
``VRH_PLUGINS`` environment variable (several separated by ``os.pathsep``: ``VRH_PLUGINS=box_peak.py vrh detect
--scorers out/sum/mean,box_peak``). The command line then takes the scorer, task, source or answer rule they
register like a built-in (adapters have their own group and ``--adapter FILE.py:Class``).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path

_SCANNED: set[tuple[str, tuple[str, ...]]] = set()
_SCANNING: set[str] = set()
PLUGIN_GROUP = "vrh.plugins"  # entry-point group: a module that registers scorers, tasks, sources or answer rules
PLUGIN_ENV = "VRH_PLUGINS"  # module names or .py files, os.pathsep-separated
_PLUGINS_DONE: set[str] = set()  # what was imported (an entry point's value, a module name or a file's path)
_PLUGINS_LOADING: list[bool] = []


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
        load_user_plugins()  # VRH_PLUGINS may have changed (cheap when nothing is new)
        return
    _SCANNING.add(package)
    try:
        for name in sorted({m.name for m in pkgutil.iter_modules(pkg.__path__)}):
            if not name.startswith("_"):
                importlib.import_module(f"{package}.{name}")
        _SCANNED.add(key)
    finally:
        _SCANNING.discard(package)
    load_user_plugins()


_ENTRY_POINTS: list[str] = []  # the group's values, read once per process (a scan of every installed package)


def _plugin_names() -> list[str]:
    if not _ENTRY_POINTS:
        from importlib.metadata import entry_points

        _ENTRY_POINTS.extend([ep.value for ep in entry_points(group=PLUGIN_GROUP)] or [""])
    named = [v for v in _ENTRY_POINTS if v]
    return named + [p for p in os.environ.get(PLUGIN_ENV, "").split(os.pathsep) if p.strip()]


def _import_file(path: Path) -> None:
    import importlib.util

    name = f"vrh_plugin_{path.stem}_{abs(hash(str(path))) % 10**8}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{PLUGIN_ENV}: {path} is not a Python file vrh can import")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def load_user_plugins() -> list[str]:
    """Import the user's extension modules (module docstring) not imported yet; returns those imported now. A
    name that is neither an importable module nor an existing ``.py`` file is a ValueError naming it."""
    if _PLUGINS_LOADING:  # a plugin that looks a registry up while it is imported sees what has registered
        return []
    done = []
    _PLUGINS_LOADING.append(True)
    try:
        for spec in _plugin_names():
            spec = spec.strip()
            path = Path(spec).expanduser()
            key = str(path.resolve()) if spec.endswith(".py") else spec
            if key in _PLUGINS_DONE:
                continue
            if spec.endswith(".py"):
                if not path.is_file():
                    raise ValueError(f"{PLUGIN_ENV}: no such file {spec}")
                _import_file(path)
            else:
                try:
                    importlib.import_module(spec)
                except ModuleNotFoundError as e:
                    if e.name and spec.startswith(e.name):
                        raise ValueError(f"{PLUGIN_ENV} or the {PLUGIN_GROUP} entry points: no module {spec!r} "
                                         "(a module name on sys.path, or a .py file)") from None
                    raise
            _PLUGINS_DONE.add(key)
            done.append(spec)
    finally:
        _PLUGINS_LOADING.pop()
    return done
