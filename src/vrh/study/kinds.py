"""The built-in kinds of study cells, one builder each, in plan order: ``data`` (prepare a dataset),
``detect`` (once per model and grounding benchmark: every cell that masks a model's heads reads this
one), ``sweep`` (k-curves, Fig. 4), ``crosstask`` (a sweep on a VQA set with a grounding benchmark's heads,
Tab. 3), ``compare`` (the design space and prior methods, Tab. A9; it runs its own all-scorer detection, as
``vrh compare`` does), ``stability`` (Fig. 8b-c), ``transfer`` (A's heads in B, Fig. 7) and ``dpo_pairs``.

Settings are the commands' own option names (``vrh sweep --ks`` is ``ks``); what a study does not set is the
command's default, so a cell's folder is what the same ``vrh`` command line writes.
"""

from __future__ import annotations

from typing import Any

from vrh.study.cells import OUT, Cell, cell_kinds, check_unique, fingerprint, register_cell_kind

TRANSFER_SEPARATOR = "_to_"  # transfer/A_to_B_BENCH (vrh.study.checks refuses pair names it would confuse)


def _model_opts(study: Any, name: str) -> dict[str, Any]:
    m, run = study.model(name), study.run
    return {"model": m.model, "adapter": m.adapter, "device": run["device"], "dtype": run["dtype"],
            "threads": run["threads"], "batch_size": run["batch_size"], "max_new_tokens": run["max_new_tokens"]}


def data_ref(study: Any, name: str) -> str:
    """The JSONL path of dataset ``name`` as cells write it (``@out/...`` when the study prepares it)."""
    from pathlib import Path

    from vrh.study.datasets import dataset_path

    spec = study.dataset(name)
    if spec.kind == "data":
        return spec.data
    return OUT + dataset_path(spec, Path("")).as_posix()


def data_deps(study: Any, *names: str) -> tuple[str, ...]:
    return tuple(f"data/{n}" for n in names if study.dataset(n).kind != "data")


def _models(study: Any, table: str) -> list[str]:
    return list(study.protocol[table].get("models") or [m.name for m in study.models])


def _benchmark(study: Any, table: str) -> str:
    return study.protocol[table].get("benchmark") or study.benchmarks[0].name


def detect_folder(model: str, bench: str) -> str:
    return f"{model}/detect_{bench}"


@register_cell_kind("data")
def data_cells(study: Any) -> list[Cell]:
    from pathlib import Path

    from vrh.study.datasets import dataset_path

    return [Cell(f"data/{d.name}", "data", None, dataset_path(d, Path("")).parent.as_posix(),
                 {"dataset": d.settings()})
            for d in (*study.benchmarks, *study.vqa) if d.kind != "data"]


@register_cell_kind("detect")
def detect_cells(study: Any) -> list[Cell]:
    det = study.protocol["detection"]
    return [Cell(f"detect/{m.name}/{b.name}", "detect", m.name, detect_folder(m.name, b.name),
                 {**_model_opts(study, m.name), "data": data_ref(study, b.name), "n": det["n"],
                  "n_eval": det["n_eval"], "scorers": list(det["scorers"]), "seed": det["seed"]},
                 (*data_deps(study, b.name),))
            for m in study.models for b in study.benchmarks]


@register_cell_kind("sweep")
def sweep_cells(study: Any) -> list[Cell]:
    if "sweep" not in study.protocol:
        return []
    sw = study.protocol["sweep"]
    benches = sw.get("benchmarks") or [b.name for b in study.benchmarks]
    return [Cell(f"sweep/{m}/{b}", "sweep", m, f"{m}/sweep_{b}",
                 {**_model_opts(study, m), "data": data_ref(study, b), "heads": OUT + detect_folder(m, b),
                  "task": "grounding", "ks": list(sw["ks"]), "seeds": list(sw["seeds"]),
                  "mask_mode": sw["mask_mode"], "n": sw["n"]},
                 (*data_deps(study, b), f"detect/{m}/{b}"))
            for m in _models(study, "sweep") for b in benches]


@register_cell_kind("crosstask")
def crosstask_cells(study: Any) -> list[Cell]:
    if "crosstask" not in study.protocol:
        return []
    ct, b = study.protocol["crosstask"], _benchmark(study, "crosstask")
    mask_mode = study.protocol.get("sweep", {}).get("mask_mode", "zero")
    return [Cell(f"crosstask/{m}/{v.name}", "crosstask", m, f"{m}/crosstask_{v.name}",
                 {**_model_opts(study, m), "data": data_ref(study, v.name), "heads": OUT + detect_folder(m, b),
                  "task": "vqa", "ks": [0, ct["k"]], "seeds": list(ct["seeds"]), "mask_mode": mask_mode},
                 (*data_deps(study, v.name), f"detect/{m}/{b}"))
            for m in _models(study, "crosstask") for v in study.vqa]


@register_cell_kind("compare")
def compare_cells(study: Any) -> list[Cell]:
    if "compare" not in study.protocol:
        return []
    cp, b = study.protocol["compare"], _benchmark(study, "compare")
    det = study.protocol["detection"]
    extra = {"methods": list(cp["methods"])} if cp["methods"] is not None else {}
    return [Cell(f"compare/{m}/{b}", "compare", m, f"{m}/compare_{b}",
                 {**_model_opts(study, m), "data": data_ref(study, b), "n": cp["n"], "n_eval": det["n_eval"],
                  "seed": det["seed"], "ks": list(cp["ks"]), "seeds": list(cp["seeds"]), **extra},
                 data_deps(study, b))
            for m in _models(study, "compare")]


@register_cell_kind("stability")
def stability_cells(study: Any) -> list[Cell]:
    if "stability" not in study.protocol:
        return []
    st, b = study.protocol["stability"], _benchmark(study, "stability")
    n_det = study.protocol["detection"]["n"]
    n_values = [n for n in st["n_values"] if n <= n_det] or [n_det]  # no draw is larger than what was scored
    return [Cell(f"stability/{m}/{b}", "stability", m, f"{m}/stability_{b}",
                 {**_model_opts(study, m), "heads": OUT + detect_folder(m, b), "data": data_ref(study, b),
                  "k": st["k"], "n_values": n_values, "bootstrap": st["bootstrap"]},
                 (*data_deps(study, b), f"detect/{m}/{b}"))
            for m in _models(study, "stability")]


@register_cell_kind("transfer")
def transfer_cells(study: Any) -> list[Cell]:
    if "transfer" not in study.protocol:
        return []
    tr, b = study.protocol["transfer"], _benchmark(study, "transfer")
    return [Cell(f"transfer/{a}{TRANSFER_SEPARATOR}{t}/{b}", "transfer", t, f"transfer/{a}{TRANSFER_SEPARATOR}{t}_{b}",
                 {**_model_opts(study, t), "data": data_ref(study, b), "heads": OUT + detect_folder(a, b),
                  "heads_b": OUT + detect_folder(t, b), "k": tr["k"], "seeds": list(tr["seeds"])},
                 (*data_deps(study, b), f"detect/{a}/{b}", f"detect/{t}/{b}"))
            for a, t in study.pairs]


@register_cell_kind("dpo_pairs")
def dpo_pairs_cells(study: Any) -> list[Cell]:
    if "dpo_pairs" not in study.protocol:
        return []
    dp, b = study.protocol["dpo_pairs"], _benchmark(study, "dpo_pairs")
    return [Cell(f"dpo_pairs/{m}/{b}", "dpo_pairs", m, f"{m}/dpo_pairs_{b}",
                 {**_model_opts(study, m), "heads": OUT + detect_folder(m, b), "k": dp["k"], "n": dp["n"]},
                 (*data_deps(study, b), f"detect/{m}/{b}"))
            for m in _models(study, "dpo_pairs")]


def transfer_source(cell: Cell) -> str:
    """The model whose heads a transfer cell masks (its id is ``transfer/A_to_B/BENCH``, B its model).

    >>> transfer_source(Cell("transfer/x_to_y_to_z/w", "transfer", "z", "transfer/x_to_y_to_z_w", {}))
    'x_to_y'
    """
    return cell.id.split("/")[1][:-len(TRANSFER_SEPARATOR + cell.model)]


def build_cells(study: Any) -> list[Cell]:
    """Every cell of ``study`` in dependency order (each kind's builder in turn), fingerprints filled; a
    ValueError when two would share a folder (:func:`vrh.study.cells.check_unique`)."""
    cells: list[Cell] = []
    prints: dict[str, str] = {}
    for builder in cell_kinds().values():
        for c in builder(study):
            missing = [d for d in c.deps if d not in prints]
            if missing:
                raise ValueError(f"cell {c.id} depends on {missing}, which no earlier cell provides")
            fp = fingerprint(c.kind, c.settings, [prints[d] for d in c.deps])
            c = Cell(c.id, c.kind, c.model, c.folder, c.settings, c.deps, fp)
            prints[c.id] = fp
            cells.append(c)
    check_unique(cells)
    return cells
