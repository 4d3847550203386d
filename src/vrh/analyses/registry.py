"""The analysis registry (a leaf: imports only the discovery helper): one registration per analysis, and every
place that lists analyses reads it.

An analysis is a folder, ``src/vrh/analyses/<name>/`` (or a package of a user's own, named in ``VRH_PLUGINS`` or
a ``vrh.plugins`` entry point, :mod:`vrh.infra.discovery`), whose ``__init__`` makes one
:func:`register_analysis` call. The registration names what the analysis is:

* ``name`` and ``help``: its command, ``vrh NAME``, and its line in ``vrh --help``; ``place`` orders that list;
* ``settings``: its settings type (a frozen dataclass of :mod:`vrh.options` groups plus its own options, with
  ``COMMAND``): the command's options, the argument of its run, what a study cell builds. Imported when the
  registration is, so its module imports only :mod:`vrh.options` (``vrh --help`` stays torch-free);
* ``run``: ``"module:function"`` (or the function itself, in a registration made in Python), the library call
  ``(settings, lm=None) -> results`` that writes its run folder, imported on first use (not from a module named
  ``run`` inside the folder: importing it would replace the package's own ``run`` function);
* ``results``: ``"module:Class"`` of its ``results.json`` kind (a ``@results_kind`` of :mod:`vrh.runs`), imported
  before a report reads runs; ``example_results``: one such file, keys in the order the run writes them (the
  results tests read it back key for key);
* ``report``: its report sections, each ``(place, "module:function")``, the function ``(runs, k) -> Section |
  list[Section] | None`` (k: the report's :class:`vrh.report.kchoice.KChoice`); a section several analyses
  share is named by each and drawn once. The report is handed them (:func:`report_sections`), it never imports
  an analysis; a run of a registered analysis with a section is no "Other run";
* ``cell_kinds``: modules that register the study cell kinds running it (:mod:`vrh.study.cells`), imported when
  the study lists its kinds;
* ``example_argv``: its least arguments besides ``--model`` and ``--out`` that pass its checks before a model
  loads, with ``{data}`` (a grounding dataset), ``{heads}`` (a detection run) and ``{pairs}`` (a dpo-pairs run)
  for the tests to fill.

>>> sorted(analyses())[:3]
['compare', 'compare-heads', 'demo']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vrh.infra.discovery import discover

PACKAGE = "vrh.analyses"


def resolve(path: str | Any) -> Any:
    """``"module:name"`` -> the object (imported now); anything else (a function or class given itself, as a
    registration made in Python may) is returned as it is."""
    if not isinstance(path, str):
        return path
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Analysis:
    """One analysis (the module docstring says each field)."""

    name: str
    help: str
    settings: type
    run: str | Callable[..., Any]
    results: str | type | None = None
    report: tuple[tuple[float, str | Callable[..., Any]], ...] = ()
    cell_kinds: tuple[str, ...] = ()
    example_argv: tuple[str, ...] = ()
    example_results: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    place: float = 1000.0

    def call(self, settings: Any, lm: Any = None) -> Any:
        """Run the analysis: its library call on ``settings`` (with ``lm``, a loaded model, or None to load one)."""
        return resolve(self.run)(settings, lm)

    def run_json(self, settings: Any, lm: Any = None) -> dict[str, Any]:
        """:meth:`call`, its results as JSON (what the command returns)."""
        res = self.call(settings, lm)
        return res.to_json() if hasattr(res, "to_json") else res

    def results_type(self) -> type | None:
        """Its results kind (imported, and so registered with :mod:`vrh.runs`), or None."""
        return resolve(self.results) if self.results else None

    def writes_run_folder(self) -> bool:
        """Whether its settings have an ``--out`` run folder."""
        return "out" in getattr(self.settings, "__dataclass_fields__", {})


_ANALYSES: dict[str, Analysis] = {}


def register_analysis(analysis: Analysis) -> Analysis:
    """Register ``analysis`` (a second registration of one name is refused, a package imported twice is not)."""
    known = _ANALYSES.get(analysis.name)
    if known is not None and (known.settings.__qualname__, str(known.run)) != (analysis.settings.__qualname__,
                                                                                str(analysis.run)):
        raise ValueError(f"analysis {analysis.name!r} registered twice")
    if getattr(analysis.settings, "COMMAND", analysis.name) != analysis.name:
        raise ValueError(f"analysis {analysis.name!r}: its settings' COMMAND is {analysis.settings.COMMAND!r}")
    _ANALYSES[analysis.name] = analysis
    return analysis


def unregister_analysis(name: str) -> None:
    """Forget ``name`` (a test's throwaway analysis)."""
    _ANALYSES.pop(name, None)


def analyses() -> dict[str, Analysis]:
    """name -> :class:`Analysis`, every one registered (vrh's folders, then the user's plugins), in ``place``
    order."""
    discover(PACKAGE)
    return dict(sorted(_ANALYSES.items(), key=lambda kv: kv[1].place))


def get_analysis(name: str) -> Analysis:
    found = analyses().get(name)
    if found is None:
        raise KeyError(f"no analysis {name!r}; registered: {', '.join(sorted(_ANALYSES))}")
    return found


def report_sections() -> tuple[list[tuple[float, Callable[..., Any]]], frozenset[str]]:
    """What the report is handed: every registered section once, ``(place, function)`` in place order, and the
    commands whose runs they draw. Imports each analysis' results kind first, so its runs are read typed."""
    seen: dict[Any, float] = {}
    drawn = set()
    for a in analyses().values():
        a.results_type()
        for place, path in a.report:
            seen.setdefault(path, place)
            drawn.add(a.name)
    ordered = sorted(seen.items(), key=lambda kv: kv[1])
    return [(place, resolve(path)) for path, place in ordered], frozenset(drawn)
