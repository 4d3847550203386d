"""The task interface and registry (a leaf: imports nothing of vrh but the discovery helper).

A *task* is what a sample asks of the model (``Sample.task``: "grounding", "vqa"). It owns three things
and nothing else (the lmms-eval shape): the **prompt** (built through the model's adapter, so each family
keeps its own wording), the **judge** (the model's text -> one JSON record with an ``outcome``) and the
**metric** (records -> one summary). Runners and commands ask :func:`get_task` for a configured task by
name and never branch on the task themselves, so a benchmark adds a task in one file, decorated with
:func:`register_task`, without touching them.

Why a leaf: task modules import this one to register, so if it imported them there would be a cycle.
Instead every lookup first imports each module of the :mod:`vrh.tasks` package
(:func:`vrh.infra.discovery.discover`): a new task is one file, and no import line or list names it.

A task's *options* (e.g. grounding's IoU threshold ``tau``) are the keyword parameters of its
constructor, each with a default; a frozen dataclass is the natural way to write one. ``get_task(name,
**options)`` rejects an option the task does not have, and :meth:`Task.config` records the values in
effect, for ``config.json``.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from vrh.infra.discovery import discover

if TYPE_CHECKING:
    from vrh.data import Sample
    from vrh.runs import SampleRecord

# Outcome names shared by the built-in tasks; plain strings so records serialize as they are.
CORRECT = "correct"
PARSE_FAILURE = "parse_failure"  # the answer did not contain anything the judge could read


class TaskAdapter(Protocol):
    """What a task needs from a model-family adapter (:class:`vrh.models.adapters.Adapter` provides it)."""

    def grounding_prompt(self, expression: str) -> str: ...

    def vqa_prompt(self, question: str) -> str: ...

    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]
                  ) -> tuple[float, float, float, float] | None: ...


class Task:
    """One kind of sample: its prompt, its judge and its aggregate metric.

    Subclasses set ``name`` (equal to the ``Sample.task`` they judge) and ``outcomes`` (every outcome the
    judge can record, the correct one first) and implement :meth:`prompt` and :meth:`judge`; ``help``
    is how ``--task``'s help describes the task in a few words ("" for none). The generic
    :meth:`summarize` counts outcomes; a task with a continuous score (grounding's IoU) extends it.
    """

    name: ClassVar[str] = ""
    outcomes: ClassVar[tuple[str, ...]] = ()
    help: ClassVar[str] = ""

    # --- what each task provides -----------------------------------------------------------------
    def prompt(self, adapter: TaskAdapter, sample: Sample) -> str:
        """The text prompt for ``sample`` (the image is passed separately), worded by ``adapter``."""
        raise NotImplementedError

    def judge(self, adapter: TaskAdapter, sample: Sample, text: str, meta: dict[str, Any]) -> SampleRecord:
        """One record for the model's answer ``text`` (``meta``: what the adapter needs to read it back,
        e.g. the resized image size). Starts from :meth:`record` and adds an ``outcome``."""
        raise NotImplementedError

    # --- shared behaviour ----------------------------------------------------------------------------
    def check_sample(self, sample: Sample) -> None:
        """Raise ValueError unless ``sample`` is one of this task's samples (a grounding sample judged by
        the VQA rules would be silently wrong, not an error)."""
        if sample.task != self.name:
            raise ValueError(f"task {self.name!r} cannot handle sample {sample.id!r} of task {sample.task!r}")

    def record(self, sample: Sample, text: str) -> SampleRecord:
        """The keys every record has, before the task's own: ``id``, ``task``, ``image``, ``pred_text``."""
        self.check_sample(sample)
        return {"id": sample.id, "task": sample.task, "image": str(sample.image_path), "pred_text": text}

    def summarize(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``n``, ``accuracy`` (fraction of ``outcomes[0]``), ``counts`` and ``fractions`` of every outcome
        (zeros included, so the keys do not depend on the data), ``parse_failure_rate`` and ``mean_iou``
        (``None`` here; tasks with an IoU fill it in). ``n = 0`` gives zeros, not NaN, so the summary
        stays valid JSON. A record with an outcome this task cannot produce is an error: it means records
        of another task were mixed in."""
        counts = dict.fromkeys(self.outcomes, 0)
        for r in records:
            outcome = r["outcome"]
            if outcome not in counts:
                raise ValueError(f"record {r.get('id')!r} has outcome {outcome!r}, which task {self.name!r} "
                                 f"does not produce (its outcomes: {', '.join(self.outcomes)})")
            counts[outcome] += 1
        n = len(records)
        fractions = {o: (c / n if n else 0.0) for o, c in counts.items()}
        return {"n": n, "accuracy": fractions[self.outcomes[0]], "counts": counts, "fractions": fractions,
                "parse_failure_rate": fractions.get(PARSE_FAILURE, 0.0), "mean_iou": None}

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        """The task's options and their defaults, in constructor order."""
        return {p.name: p.default for p in inspect.signature(cls).parameters.values()}

    def config(self) -> dict[str, Any]:
        """The task's settings for ``config.json``, e.g. ``{"name": "grounding", "tau": 0.5}``."""
        return {"name": self.name, **{k: getattr(self, k) for k in self.option_defaults()}}


_TASKS: dict[str, type[Task]] = {}
_PACKAGE = __name__.rpartition(".")[0]  # vrh.tasks: every module of it is imported before a lookup


def _tasks() -> dict[str, type[Task]]:
    """The registry, once every module of the package has been imported."""
    discover(_PACKAGE)
    return _TASKS


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make ``cls`` available as ``get_task(cls.name)``.

    Checked here rather than at first use, so a malformed task fails when its module is imported: a
    ``name``, a non-empty tuple of distinct ``outcomes``, and options that are keyword parameters with
    defaults (``get_task(name)`` must always work). A name registered twice by different classes is an
    error.
    """
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"register_task expects a Task subclass, got {cls!r}")
    if not isinstance(cls.name, str) or not cls.name:
        raise ValueError(f"{cls.__name__} must set a non-empty string `name`")
    outcomes = cls.outcomes
    if (not isinstance(outcomes, tuple) or not outcomes or not all(isinstance(o, str) for o in outcomes)
            or len(set(outcomes)) != len(outcomes)):
        raise ValueError(f"{cls.__name__}.outcomes must be a non-empty tuple of distinct strings (the correct "
                         f"outcome first), got {outcomes!r}")
    for p in inspect.signature(cls).parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.default is p.empty:
            raise ValueError(f"{cls.__name__}: option {p.name!r} must be a keyword parameter with a default")
    if cls.name in _TASKS and _TASKS[cls.name] is not cls:
        raise ValueError(f"task name {cls.name!r} registered twice ({_TASKS[cls.name].__name__} and "
                         f"{cls.__name__})")
    _TASKS[cls.name] = cls
    return cls


def task_names() -> tuple[str, ...]:
    """Registered task names, sorted."""
    return tuple(sorted(_tasks()))


def describe_tasks() -> dict[str, str]:
    """``{name: help}`` of every registered task, sorted by name (what ``--task``'s help lists)."""
    return {name: _tasks()[name].help for name in task_names()}


def get_task(name: str, **options: Any) -> Task:
    """The task ``name`` configured with ``options``; an unknown name or option is a ValueError that lists
    what exists (the task's own constructor validates the values)."""
    if name not in _tasks():
        raise ValueError(f"unknown task {name!r}; registered tasks: {', '.join(task_names()) or 'none'}")
    cls = _TASKS[name]
    defaults = cls.option_defaults()
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        have = ", ".join(f"{k} (default {v!r})" for k, v in defaults.items()) or "none"
        raise ValueError(f"unknown option(s) {', '.join(map(repr, unknown))} for task {name!r}; its options: {have}")
    return cls(**options)


def task_from_settings(name: str, settings: Mapping[str, Any]) -> Task:
    """The task ``name`` configured from a command's settings (e.g. ``{"tau": 0.5}``), passing only the
    options this task declares: a command offers its evaluation options to whichever task runs, without
    knowing which task takes which.

    >>> task_from_settings("vqa", {"tau": 0.7}).config(), task_from_settings("grounding", {"tau": 0.7}).config()
    ({'name': 'vqa', 'answer_rule': 'official'}, {'name': 'grounding', 'tau': 0.7, 'clip': False})
    """
    if name not in _tasks():
        raise ValueError(f"unknown task {name!r}; registered tasks: {', '.join(task_names()) or 'none'}")
    declared = _TASKS[name].option_defaults()
    return get_task(name, **{k: v for k, v in settings.items() if k in declared})
