"""The built-in kinds of study cells, one registration each (:func:`vrh.study.cells.register_cell_kind`), in
plan order: ``data`` (prepare a dataset), ``detect`` (once per model and grounding benchmark: every cell that
masks a model's heads reads this one), ``sweep`` (k-curves, Fig. 4), ``crosstask`` (a sweep on a VQA set with a
grounding benchmark's heads, Tab. 3), ``compare`` (the design space and prior methods, Tab. A9; it runs its
own all-scorer detection, as ``vrh compare`` does), ``stability`` (Fig. 8b-c), ``transfer`` (A's heads in B,
Fig. 7) and ``dpo_pairs``. Each names its builder, its study-file table (keys, defaults, bounds) and the
library call its cells run with the settings type they build.

Settings are the settings types' own field names, which are the commands' options (``vrh sweep --ks`` is
``ks``); what a study does not set is the default, so a cell's folder is what the same ``vrh`` command line
writes.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from vrh.analyses.registry import get_analysis
from vrh.options import ShareOptions
from vrh.study import values as v
from vrh.study.cells import OUT, Cell, CellKind, cell_kinds, check_unique, fingerprint, register_cell_kind
from vrh.study.datasets import DatasetKind


TRANSFER_SEPARATOR = "_to_"  # transfer/A_to_B_BENCH (vrh.study.checks refuses pair names it would confuse)


def _model_opts(study: Any, name: str) -> dict[str, Any]:
    m, run = study.model(name), study.run
    # answer_format only when the study sets it: the cells of earlier studies keep their settings (and fingerprints)
    fmt = {"answer_format": m.answer_format} if m.answer_format is not None else {}
    return {"model": m.model, "adapter": m.adapter, "device": run.device, "dtype": run.dtype,
            "threads": run.threads, "batch_size": run.batch_size, "max_new_tokens": run.max_new_tokens, **fmt}


def _share_opts(study: Any) -> dict[str, Any]:
    """The masking cells' work sharing, only where the study turns a share off: the cells of other studies keep
    their settings (the shares are exact and never in a fingerprint, :data:`vrh.study.cells.NOT_FINGERPRINTED`)."""
    return {f.name: False for f in fields(ShareOptions) if not getattr(study.run, f.name)}


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
    return list(study.protocol[table].models or [m.name for m in study.models])


def _benchmark(study: Any, table: str) -> str:
    return study.protocol[table].benchmark or study.benchmarks[0].name


def detect_folder(model: str, bench: str) -> str:
    return f"{model}/detect_{bench}"


def data_cells(study: Any) -> list[Cell]:
    from pathlib import Path

    from vrh.study.datasets import dataset_path

    return [Cell(f"data/{d.name}", "data", None, dataset_path(d, Path("")).parent.as_posix(),
                 {"dataset": d.settings()}, benchmark=d.name)
            for d in (*study.benchmarks, *study.vqa) if d.kind != "data"]


def detect_cells(study: Any) -> list[Cell]:
    det = study.protocol["detection"]
    return [Cell(f"detect/{m.name}/{b.name}", "detect", m.name, detect_folder(m.name, b.name),
                 {**_model_opts(study, m.name), "data": data_ref(study, b.name), "n": det.n,
                  "n_eval": det.n_eval, "scorers": list(det.scorers), "seed": det.seed},
                 (*data_deps(study, b.name),), benchmark=b.name)
            for m in study.models for b in study.benchmarks]


def sweep_cells(study: Any) -> list[Cell]:
    if "sweep" not in study.protocol:
        return []
    sw = study.protocol["sweep"]
    benches = sw.benchmarks or [b.name for b in study.benchmarks]
    return [Cell(f"sweep/{m}/{b}", "sweep", m, f"{m}/sweep_{b}",
                 {**_model_opts(study, m), **_share_opts(study),
                  "data": data_ref(study, b), "heads": OUT + detect_folder(m, b),
                  "task": "grounding", "ks": list(sw.ks), "seeds": list(sw.seeds),
                  "mask_mode": sw.mask_mode, "n": sw.n},
                 (*data_deps(study, b), f"detect/{m}/{b}"), benchmark=b)
            for m in _models(study, "sweep") for b in benches]


def crosstask_cells(study: Any) -> list[Cell]:
    if "crosstask" not in study.protocol:
        return []
    ct, b = study.protocol["crosstask"], _benchmark(study, "crosstask")
    mask_mode = study.protocol["sweep"].mask_mode if "sweep" in study.protocol else "zero"
    return [Cell(f"crosstask/{m}/{vq.name}", "crosstask", m, f"{m}/crosstask_{vq.name}",
                 {**_model_opts(study, m), **_share_opts(study),
                  "data": data_ref(study, vq.name), "heads": OUT + detect_folder(m, b),
                  "task": "vqa", "ks": [0, ct.k], "seeds": list(ct.seeds), "mask_mode": mask_mode},
                 (*data_deps(study, vq.name), f"detect/{m}/{b}"), benchmark=vq.name)
            for m in _models(study, "crosstask") for vq in study.vqa]


def compare_cells(study: Any) -> list[Cell]:
    if "compare" not in study.protocol:
        return []
    cp, b = study.protocol["compare"], _benchmark(study, "compare")
    det = study.protocol["detection"]
    extra = {"methods": list(cp.methods)} if cp.methods is not None else {}
    return [Cell(f"compare/{m}/{b}", "compare", m, f"{m}/compare_{b}",
                 {**_model_opts(study, m), **_share_opts(study),
                  "data": data_ref(study, b), "n": cp.n, "n_eval": det.n_eval,
                  "seed": det.seed, "ks": list(cp.ks), "seeds": list(cp.seeds), **extra},
                 data_deps(study, b), benchmark=b)
            for m in _models(study, "compare")]


def stability_cells(study: Any) -> list[Cell]:
    if "stability" not in study.protocol:
        return []
    st, b = study.protocol["stability"], _benchmark(study, "stability")
    n_det = study.protocol["detection"].n
    n_values = [n for n in st.n_values if n <= n_det] or [n_det]  # no draw is larger than what was scored
    return [Cell(f"stability/{m}/{b}", "stability", m, f"{m}/stability_{b}",
                 {**_model_opts(study, m), **_share_opts(study),
                  "heads": OUT + detect_folder(m, b), "data": data_ref(study, b),
                  "k": st.k, "n_values": n_values, "bootstrap": st.bootstrap},
                 (*data_deps(study, b), f"detect/{m}/{b}"), benchmark=b)
            for m in _models(study, "stability")]


def transfer_cells(study: Any) -> list[Cell]:
    if "transfer" not in study.protocol:
        return []
    tr, b = study.protocol["transfer"], _benchmark(study, "transfer")
    return [Cell(f"transfer/{a}{TRANSFER_SEPARATOR}{t}/{b}", "transfer", t, f"transfer/{a}{TRANSFER_SEPARATOR}{t}_{b}",
                 {**_model_opts(study, t), **_share_opts(study),
                  "data": data_ref(study, b), "heads": OUT + detect_folder(a, b),
                  "heads_b": OUT + detect_folder(t, b), "k": tr.k, "seeds": list(tr.seeds)},
                 (*data_deps(study, b), f"detect/{a}/{b}", f"detect/{t}/{b}"), benchmark=b, source=a)
            for a, t in study.pairs]


def dpo_pairs_cells(study: Any) -> list[Cell]:
    if "dpo_pairs" not in study.protocol:
        return []
    dp, b = study.protocol["dpo_pairs"], _benchmark(study, "dpo_pairs")
    return [Cell(f"dpo_pairs/{m}/{b}", "dpo_pairs", m, f"{m}/dpo_pairs_{b}",
                 {**_model_opts(study, m), **_share_opts(study),
                  "heads": OUT + detect_folder(m, b), "k": dp.k, "n": dp.n},
                 (*data_deps(study, b), f"detect/{m}/{b}"), benchmark=b)
            for m in _models(study, "dpo_pairs")]


def runs_analysis(name: str) -> dict[str, Any]:
    """A run-folder kind's ``settings`` and ``run``: the registered analysis ``name``'s settings type and its
    library call (:mod:`vrh.analyses.registry`; imported when a cell runs)."""
    analysis = get_analysis(name)
    return {"settings": analysis.settings, "run": analysis.call}


# --- the registrations: builder, table (keys, defaults, bounds), settings type and library call ----------
register_cell_kind(DatasetKind("data", data_cells))
register_cell_kind(CellKind(
    "detect", detect_cells, table="detection", always=True,
    keys={"n": int, "n_eval": int, "scorers": list, "seed": int},
    defaults={"n": 200, "n_eval": None, "scorers": ["out/sum/mean"], "seed": 0},
    rules={"n": v.POSITIVE, "n_eval": v.POSITIVE, "seed": v.SEED,
           "scorers": v.str_list("give at least one scorer (the first ranks the heads)")},
    **runs_analysis("detect")))
register_cell_kind(CellKind(
    "sweep", sweep_cells, table="sweep",
    keys={"ks": list, "seeds": list, "mask_mode": str, "n": int, "benchmarks": list, "models": list},
    defaults={"ks": [0, 1, 3, 5, 10, 20, 50], "seeds": [0, 1, 2], "mask_mode": "zero", "n": None},
    rules={"ks": v.KS, "seeds": v.SEEDS, "n": v.POSITIVE, "benchmarks": v.BENCHMARKS, "models": v.MODELS},
    **runs_analysis("sweep")))
register_cell_kind(CellKind(
    "crosstask", crosstask_cells, table="crosstask",
    keys={"k": int, "seeds": list, "benchmark": str, "models": list},
    defaults={"k": 20, "seeds": [0, 1, 2]},
    rules={"k": v.POSITIVE, "seeds": v.SEEDS, "models": v.MODELS},
    **runs_analysis("sweep")))
register_cell_kind(CellKind(
    "compare", compare_cells, table="compare",
    keys={"ks": list, "methods": list, "seeds": list, "n": int, "benchmark": str, "models": list},
    defaults={"ks": [5, 10, 20, 50], "methods": None, "seeds": [0, 1, 2], "n": 200},
    rules={"ks": v.KS, "seeds": v.SEEDS, "n": v.POSITIVE, "models": v.MODELS,
           "methods": v.str_list("leave it out for vrh compare's own list")},
    **runs_analysis("compare")))
register_cell_kind(CellKind(
    "transfer", transfer_cells, table="transfer",
    keys={"k": int, "seeds": list, "benchmark": str, "pairs": (str, list), "both_directions": bool},
    defaults={"k": 20, "seeds": [0, 1, 2], "pairs": "auto", "both_directions": True},
    rules={"k": v.POSITIVE, "seeds": v.SEEDS, "pairs": v.pairs},
    **runs_analysis("transfer")))
register_cell_kind(CellKind(
    "stability", stability_cells, table="stability",
    keys={"k": int, "n_values": list, "bootstrap": int, "benchmark": str, "models": list},
    defaults={"k": 20, "n_values": [1, 2, 5, 10, 20, 50, 100, 200], "bootstrap": 10},
    rules={"k": v.POSITIVE, "bootstrap": v.POSITIVE, "models": v.MODELS,
           "n_values": v.int_list(1, "give at least one number of detection samples to draw")},
    **runs_analysis("stability")),
    plan_after="compare")  # the study file lists [transfer] first; the plan has always run stability first
register_cell_kind(CellKind(
    "dpo_pairs", dpo_pairs_cells, table="dpo_pairs",
    keys={"k": int, "n": int, "benchmark": str, "models": list},
    defaults={"k": 20, "n": None},
    rules={"k": v.POSITIVE, "n": v.POSITIVE, "models": v.MODELS},
    **runs_analysis("dpo-pairs")))


def build_cells(study: Any) -> list[Cell]:
    """Every cell of ``study`` in dependency order (each kind's builder in turn), fingerprints filled; a
    ValueError when two would share a folder (:func:`vrh.study.cells.check_unique`)."""
    from dataclasses import replace

    cells: list[Cell] = []
    prints: dict[str, str] = {}
    for kind in cell_kinds().values():
        for c in kind.build(study):
            missing = [d for d in c.deps if d not in prints]
            if missing:
                raise ValueError(f"cell {c.id} depends on {missing}, which no earlier cell provides")
            c = replace(c, fingerprint=fingerprint(c.kind, c.settings, [prints[d] for d in c.deps]))
            prints[c.id] = c.fingerprint
            cells.append(c)
    check_unique(cells)
    return cells
