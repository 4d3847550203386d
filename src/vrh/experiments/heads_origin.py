"""What a run that reads another run's heads takes from it: the settings the ranking was detected under.

A head ranking is detected on one model, answering grounding prompts in one answer format (the prompt and the
box writing: ``model.answer_format`` in the run's ``config.json``), on one task, and scored by one scorer
(``head_scores.json`` names its default; ``--scorer`` picks another of the file's maps, so that setting travels
with the file already). When ``vrh evaluate --mask-heads D``, ``vrh sweep --heads D``, ``vrh dpo-pairs --heads D``
or ``vrh text-heads --cross-heads D`` reads D's ranking:

* **answer format** (grounding runs): not given -> D's, said in one line on stderr; given differently -> refused
  before anything runs, as ``--resume`` refuses a changed setting (heads found while the model wrote one format,
  masked while it writes another, would measure the format change along with the heads);
* **task**: D's task is named in one line when it is not this run's (the paper masks grounding heads in VQA on
  purpose, so it is said, not refused);
* **model**: heads of another model get one line naming both and pointing at ``vrh transfer`` (the command that
  measures a ranking moved across models, with its controls); a different head grid is refused where the heads
  are checked (:func:`vrh.core.heads.check_grid`).

:func:`origin` reads what D recorded; :func:`adopt` applies the rules to a loaded model; :func:`model_line` is
the one line, for any command comparing rankings of two models (``compare-heads``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HeadsOrigin:
    """What the run folder ``path`` recorded of the run that ranked its heads (``config.json``)."""

    path: str
    command: str | None
    model: dict[str, Any]  # config.json's "model": path, model_type, num_layers, num_heads, answer_format
    task: str | None

    @property
    def answer_format(self) -> dict[str, Any] | None:
        fmt = self.model.get("answer_format")
        return fmt if isinstance(fmt, dict) and isinstance(fmt.get("name"), str) else None


def origin(spec: str | None) -> HeadsOrigin | None:
    """The origin of the heads in run folder ``spec``; None for a head list, a named list or a folder without
    a readable ``config.json`` (nothing recorded to take or check)."""
    from vrh import runs

    if spec is None or not str(spec).strip() or not Path(spec).is_dir():
        return None
    try:
        cfg = runs.read_config(spec)
    except (OSError, ValueError):
        return None
    model = cfg.get("model") if isinstance(cfg.get("model"), dict) else {}
    task = cfg.get("task")
    task = task.get("name") if isinstance(task, dict) else task if isinstance(task, str) else None
    if task is None and isinstance(cfg.get("data"), dict):
        task = cfg["data"].get("task")
    return HeadsOrigin(str(spec), cfg.get("command"), model, task if isinstance(task, str) else None)


def model_name(model: dict[str, Any]) -> str:
    """A model as a person reads it: its path or hub id, and its model type and head grid."""
    grid = (f"{model['num_layers']} x {model['num_heads']} heads"
            if model.get("num_layers") is not None and model.get("num_heads") is not None else "grid unknown")
    return f"{model.get('path') or '?'} ({model.get('model_type') or '?'}, {grid})"


def same_model(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two ``config.json`` model records name one checkpoint (path, revision, type and grid)."""
    keys = ("path", "revision", "model_type", "num_layers", "num_heads")
    return all(a.get(k) == b.get(k) for k in keys)


def model_line(a: dict[str, Any], b: dict[str, Any], what: str = "the heads") -> str | None:
    """One line when ``what`` (ranked on model record ``a``) meets model ``b``; None for one model.

    >>> print(model_line({"path": "A", "num_layers": 2, "num_heads": 4}, {"path": "B", "num_layers": 2, "num_heads": 4}))
    the heads were ranked on A (?, 2 x 4 heads), this run's model is B (?, 2 x 4 heads): heads of one model used on another (vrh transfer measures that, with random and own-head controls)
    """
    if same_model(a, b):
        return None
    return (f"{what} were ranked on {model_name(a)}, this run's model is {model_name(b)}: heads of one model used "
            "on another (vrh transfer measures that, with random and own-head controls)")


def _variant(record: dict[str, Any], adapter: Any):
    """The answer format ``record`` (config.json's ``model.answer_format``) names, for ``adapter``: by name when
    the family declares it or it is shared, else rebuilt from the record (a variant from a user's file)."""
    from vrh.models import answer_formats as af

    known = {f.name: f for f in (*af.SHARED, *af.declared(adapter))}
    if record["name"] in known:
        return known[record["name"]]
    box = record.get("box")
    return af.AnswerFormat(record["name"], record.get("prompt"), None if box in (None, "native") else box)


def adopt(lm: Any, given: str | None, spec: str | None, *, command: str, option: str, task: str | None,
          uses_answer_format: bool = True) -> Any:
    """``lm`` answering in the heads' answer format, after the checks of the module docstring; notes on stderr.

    ``given``: the run's ``--answer-format`` (None: not given); ``task``: this run's task; ``uses_answer_format``
    False for a run whose prompts ask for no box (text-heads, VQA). A mismatch raises ValueError naming both."""
    from vrh.infra.console import console, warn
    from vrh.models import answer_formats as af

    o = origin(spec)
    if o is None:
        return lm
    here = lm.describe() if hasattr(lm, "describe") else {}
    line = model_line(o.model, here) if o.model and here else None
    if line:
        warn(f"{command}: {option} {spec}: {line}")
    if o.task and task and o.task != task:
        console.print(f"{command}: the heads of {spec} were ranked on the {o.task} task; this run is {task}",
                      markup=False, highlight=False)
    theirs = o.answer_format
    if theirs is None or not uses_answer_format or line:
        return lm  # nothing recorded, no box asked for, or another model (its format is not this one's to take)
    ours = af.record(lm.adapter)
    if (ours["name"], ours["box"]) == (theirs["name"], theirs.get("box", "native")):
        return lm
    if given is not None:
        raise ValueError(f"{command}: --answer-format {given} differs from the heads' run {spec}, which ranked its "
                         f"heads answering in {theirs['name']} (its config.json model.answer_format): pass "
                         f"--answer-format {theirs['name']}, or leave it out to take it from that run")
    lm = lm.with_answer_format(_variant(theirs, lm.adapter))
    console.print(f"{command}: answer format {theirs['name']}, taken from the heads' run {spec} (its config.json; "
                  "--answer-format to choose)", markup=False, highlight=False)
    return lm
