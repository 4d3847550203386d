"""A study's datasets, prepared under ``DIR/data/<name>/``: a converted JSONL is used where it is, a ``vrh
data`` source is converted from its snapshot (:func:`vrh.data.sources.convert`), and the synthetic world
is drawn with :func:`vrh.organism.world.write_split` -- or, with ``layout = "refcoco"``, written as a RefCOCO
snapshot in the lmms-lab parquet layout and converted by the ``refcoco`` source, so that a study on the
organisms also runs a real benchmark's converter end to end.

A dataset to prepare is a cell of the kind :class:`DatasetKind` (``data``): its folder is not a run folder, so
the kind says how it runs, when it is finished (its :data:`DATA_MARK`, written last) and what a redo removes
(only what the study recorded writing, :mod:`vrh.runs.written`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vrh.runs import written
from vrh.study.cells import Cell, CellKind

DATA_MARK = "study_data.json"  # written into a data cell's folder once its dataset is complete
SNAPSHOT = "snapshot"  # the world-as-RefCOCO parquet folder, inside the dataset's folder
REFCOCO_SPLIT = "val"


@dataclass(frozen=True)
class DatasetSpec:
    """A grounding benchmark or VQA set. ``kind``: ``data`` (a converted JSONL), ``source`` (a ``vrh data``
    source converted from ``snapshot``) or ``world`` (the synthetic world, optionally through ``layout``)."""

    name: str
    task: str  # grounding | vqa
    kind: str
    data: str | None = None
    source: str | None = None
    snapshot: str | None = None
    split: str | None = None
    limit: int | None = None
    n: int | None = None
    seed: int | None = None
    layout: str | None = None

    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def dataset_path(spec: Any, out: Path) -> Path:
    """The JSONL the study's cells read for ``spec`` (a :class:`DatasetSpec`)."""
    if spec.kind == "data":
        return Path(spec.data)
    folder = out / "data" / spec.name
    if spec.kind == "world" and spec.layout is None:
        return folder / f"{spec.task}.jsonl"
    return folder / "data.jsonl"


def prepare(spec: Any, out: Path) -> Path:
    """Write ``spec``'s dataset under ``out/data/<name>`` (nothing for a ``data`` entry); returns its JSONL.
    Rewrites from scratch: a half-written dataset from a killed study is replaced, never reused."""
    from vrh.data.sources import convert

    path = dataset_path(spec, out)
    if spec.kind == "data":
        return path
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    if spec.kind == "world" and spec.layout is None:
        from vrh.organism.world import write_split

        return write_split(folder, spec.n, spec.seed, spec.task)
    if spec.kind == "world":
        snapshot = folder / SNAPSHOT / "data" / f"{REFCOCO_SPLIT}-00000-of-00001.parquet"
        written.record(folder, [snapshot])  # vrh's, as everything the study writes in the folder (--overwrite's list)
        src = write_world_refcoco(folder / SNAPSHOT, spec.n, spec.seed)
        convert("refcoco", src, folder, split=REFCOCO_SPLIT, overwrite=True, progress=False)
        return path
    convert(spec.source, spec.snapshot, folder, split=spec.split, limit=spec.limit, overwrite=True, progress=False)
    return path


def world_refcoco_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """The world's grounding samples ``(seed, 0..n-1)`` as rows of lmms-lab/RefCOCO: ``question_id``,
    ``image`` ``{bytes, path}`` (PNG), ``question``, ``answer`` (the expression, as the list RefCOCO stores),
    ``bbox`` ``[x, y, w, h]`` px, ``file_name``."""
    from vrh.organism.world import grounding_sample, render

    rows = []
    for i in range(n):
        s = grounding_sample(seed, i)
        buf = io.BytesIO()
        render(s["scene"]).save(buf, format="PNG")
        x1, y1, x2, y2 = s["box"]  # xyxy px -> RefCOCO's xywh
        name = f"world_{seed}_{i:06d}.png"
        rows.append({"question_id": f"{seed}-{i}", "image": {"bytes": buf.getvalue(), "path": name},
                     "question": "Please carefully observe the area circled in the image and come up with a caption.",
                     "answer": [s["expression"]], "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                     "file_name": name})
    return rows


def write_world_refcoco(folder: Path, n: int, seed: int) -> Path:
    """A RefCOCO snapshot folder (``data/val-00000-of-00001.parquet``) holding the world's samples."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(world_refcoco_rows(n, seed)),
                   folder / "data" / f"{REFCOCO_SPLIT}-00000-of-00001.parquet")
    return folder


class DatasetKind(CellKind):
    """The kind of the cells that prepare the study's datasets (:func:`prepare`): no model, no settings type,
    no command line (``vrh study run`` prepares them), and not a sub-run of the report."""

    writes_run_folder = False

    def check(self, cell: Cell, out: Path) -> None:
        """Nothing to build: the study file's dataset entries were checked when it was read."""

    def execute(self, cell: Cell, out: Path, models: Any) -> None:
        from vrh.runs import write_json

        path = prepare(DatasetSpec(**cell.settings["dataset"]), out)
        written.record(out / cell.folder, [DATA_MARK])  # the study's, as everything prepare wrote there
        write_json(out / cell.folder / DATA_MARK, {"dataset": cell.settings["dataset"], "path": path.name}, root=out)

    def finished(self, out: Path, cell: Cell) -> bool:
        """Whether the dataset is complete (its JSONL and the mark, written last)."""
        return (out / cell.folder / DATA_MARK).is_file()

    def clear(self, out: Path, cell: Cell) -> None:
        """Remove the files the study recorded writing in the folder; anything else is refused by name."""
        written.remove_written(out / cell.folder, f"redoing cell {cell.id}")

    def command_line(self, cell: Cell, out: Path) -> list[str] | None:
        return None
