"""The checks of a study file that need vrh's registries or the models' configs (no weights): scorer and
method specs, mask modes, source and adapter names, names that refer to the study's own models and
benchmarks, the detection and comparison splits against the benchmark sizes, every k against each model's
head grid (room for k random heads outside the top-k, :func:`vrh.experiments.conditions.check_room`), the
names of transfer pairs against their folder, and every cell's settings value (:func:`check_cells`).
Each failure names the line of the study file (:meth:`vrh.study.spec._Reader.fail`)."""

from __future__ import annotations

from typing import Any


def check_study(study: Any, r: Any) -> tuple[dict[str, tuple[int, int]], tuple[tuple[str, str], ...]]:
    """Raise :class:`vrh.study.spec.StudyError` on the first problem; return the models' grids and the
    resolved transfer pairs (ordered: A's heads into B). One check per table, in the order below."""
    p = study.protocol
    _check_sources(study, r)
    written = {table: p[table].record() for table in p}  # each table's keys written or defaulted
    _check_names(study, r, written)
    _check_detection(p, r)
    if "compare" in p:
        _check_compare(p, r)
    if "sweep" in p:
        _check_sweep(p, r)
    for m in study.models:
        if m.adapter is not None:
            _check_adapter(r, m.adapter, ("models", m.name, "adapter"))
    _check_splits(study, r)
    backbones = _backbones(study, r)
    grids = {name: b.grid for name, b in backbones.items()}
    _check_ks(study, r, written, grids)
    pairs = _transfer_pairs(study, r, backbones, grids) if "transfer" in p else ()
    return grids, pairs


def _check_sources(study: Any, r: Any) -> None:
    """[benchmarks.NAME] and [vqa.NAME]: a source is a registered one."""
    from vrh.data.sources import get_source

    for d in (*study.benchmarks, *study.vqa):
        if d.kind == "source":
            try:
                get_source(d.source)
            except ValueError as e:
                raise r.fail((_section(d), d.name, "source"), str(e)) from None


def _check_names(study: Any, r: Any, written: dict[str, dict[str, Any]]) -> None:
    """Every table: the models and benchmarks it names are the study's own; [crosstask] needs a VQA set."""
    models = [m.name for m in study.models]
    benchmarks = [b.name for b in study.benchmarks]

    def names(table: str, key: str, known: list[str], what: str) -> None:
        if key not in written[table]:
            return
        value = written[table][key]
        for v in ([value] if isinstance(value, str) else value):
            if v not in known:
                raise r.fail((table, key), f"{table}.{key}: {v!r} is not one of the study's {what} {known}")

    for table in study.protocol:
        names(table, "models", models, "models")
        names(table, "benchmark", benchmarks, "grounding benchmarks")
        names(table, "benchmarks", benchmarks, "grounding benchmarks")
    if "crosstask" in study.protocol and not study.vqa:
        raise r.fail(("crosstask",), "[crosstask] evaluates the VQA sets, and the study has none ([vqa.NAME])")


def _check_detection(p: Any, r: Any) -> None:
    """[detection]: its scorer specs."""
    from vrh.experiments.detection import check_scorers

    det = p["detection"]
    try:
        check_scorers(det.scorers, det.seed)
    except ValueError as e:
        raise r.fail(("detection", "scorers"), f"detection.scorers: {e}") from None


def _check_compare(p: Any, r: Any) -> None:
    """[compare]: its method specs, and at least the comparison's minimum of distinct seeds."""
    from vrh.experiments.detection import check_scorers
    from vrh.analyses.compare.settings import MIN_SEEDS

    if p["compare"].methods is not None:
        try:
            check_scorers(p["compare"].methods)
        except ValueError as e:
            raise r.fail(("compare", "methods"), f"compare.methods: {e}") from None
    if len(set(p["compare"].seeds)) < MIN_SEEDS:  # the comparison's own rule
        raise r.fail(("compare", "seeds"), f"compare.seeds: at least {MIN_SEEDS} distinct seeds")


def _check_sweep(p: Any, r: Any) -> None:
    """[sweep]: a registered mask mode."""
    from vrh.core.masking import mask_mode_names

    if p["sweep"].mask_mode not in mask_mode_names():
        raise r.fail(("sweep", "mask_mode"), f"sweep.mask_mode {p['sweep'].mask_mode!r}: one of "
                                             f"{list(mask_mode_names())}")


def _check_splits(study: Any, r: Any) -> None:
    """[detection] and [compare]: their sample counts fit every benchmark they detect on."""
    p, det = study.protocol, study.protocol["detection"]
    sizes = {d.name: d.n if d.kind == "world" else d.limit if d.kind == "source" else _data_size(r, d)
             for d in (*study.benchmarks, *study.vqa)}
    for d in study.benchmarks:
        _check_split(r, "detection", det.n, det.n_eval, d.name, sizes[d.name])
    if "compare" in p:
        b = p["compare"].benchmark or study.benchmarks[0].name
        _check_split(r, "compare", p["compare"].n, det.n_eval, b, sizes[b])


def _backbones(study: Any, r: Any) -> dict[str, Any]:
    """[models.NAME]: each model's backbone (its head grid) read from its config, no weights."""
    from vrh.study.backbones import backbone

    backbones = {}
    for m in study.models:
        try:
            backbones[m.name] = backbone(m.model)
        except (OSError, ValueError) as e:
            raise r.fail(("models", m.name), f"model {m.name}: {e}") from None
    return backbones


def _check_ks(study: Any, r: Any, written: dict[str, dict[str, Any]], grids: dict[str, tuple[int, int]]) -> None:
    """Every table's head counts against each of its models' grids: its lists of k ("ks") first, then its
    single k ("k")."""
    from vrh.experiments.conditions import check_room

    models = [m.name for m in study.models]
    ks = {(table, "ks"): w["ks"] for table, w in written.items() if "ks" in w}
    ks.update({(table, "k"): [w["k"]] for table, w in written.items() if "k" in w})
    for (table, key), values in ks.items():
        for name in written[table].get("models") or models:
            L, H = grids[name]
            for k in values:
                if not isinstance(k, int) or (key == "k" and k < 1):
                    raise r.fail((table, key), f"{table}.{key}: {k!r} must be an integer >= {1 if key == 'k' else 0}")
                try:
                    check_room(k, L, H, f"{table}.{key}")
                except ValueError as e:
                    raise r.fail((table, key), f"model {name}: {e}") from None


def _transfer_pairs(study: Any, r: Any, backbones: dict[str, Any],
                    grids: dict[str, tuple[int, int]]) -> tuple[tuple[str, str], ...]:
    """[transfer]: its pairs ("auto": the models sharing a backbone), each of two models of one grid whose
    names can make its folder; both directions when asked."""
    from vrh.study.backbones import shared_backbone_pairs
    from vrh.study.kinds import TRANSFER_SEPARATOR

    models = [m.name for m in study.models]
    given = study.protocol["transfer"].pairs
    if given == "auto":
        found = shared_backbone_pairs(backbones)
    elif isinstance(given, str):
        raise r.fail(("transfer", "pairs"), f"transfer.pairs: \"auto\" or a list of [A, B] pairs, got {given!r}")
    else:
        found = []
        for pair in given:
            if not (isinstance(pair, list) and len(pair) == 2 and all(x in models for x in pair)):
                raise r.fail(("transfer", "pairs"), f"transfer.pairs: {pair!r} is not [A, B] of the study's "
                                                    f"models {models}")
            found.append(tuple(pair))
    for a, b in found:
        for name in (a, b):
            if TRANSFER_SEPARATOR in name or name.startswith("to_") or name.endswith("_to"):
                raise r.fail(("models", name), f"model name {name!r} is in a transfer pair, whose folder is "
                                               f"A{TRANSFER_SEPARATOR}B_BENCH: such a name may not hold "
                                               f"{TRANSFER_SEPARATOR!r}, begin with 'to_' or end with '_to' "
                                               "(two pairs could share a folder); rename the model")
        if grids[a] != grids[b]:
            raise r.fail(("transfer", "pairs"), f"transfer {a} -> {b}: different layer x head grids "
                                                f"{grids[a]} and {grids[b]}")
    both = study.protocol["transfer"].both_directions
    return tuple(dict.fromkeys([*found, *((b, a) for a, b in found if both)]))


def _section(d: Any) -> str:
    return "vqa" if d.task == "vqa" else "benchmarks"


def _check_split(r: Any, table: str, n: int, n_eval: int | None, bench: str, size: int | None) -> None:
    """A detection of ``n`` samples (and ``n_eval`` held out) must fit in the benchmark, as the command's
    :func:`vrh.experiments.detection.detection_split` requires, with at least one sample held out."""
    if size is None:  # a source converted without a limit: its size is known once converted
        return
    if n >= size:
        raise r.fail((table, "n"), f"{table}.n {n} leaves no held-out samples in benchmark {bench!r} ({size} samples)")
    if n_eval is not None and n + n_eval > size:
        raise r.fail(("detection", "n_eval"), f"{table}.n {n} + detection.n_eval {n_eval} asks for more samples "
                                              f"than benchmark {bench!r} has ({size})")


def _check_adapter(r: Any, adapter: str, keys: tuple[str, ...]) -> None:
    """A registered adapter name, or a ``file.py:Class`` whose file exists (resolved from the working
    directory, as ``--adapter`` is). The file is not imported here: it runs when its model loads
    (docs/study.md: a study file is code)."""
    from pathlib import Path

    from vrh.models.adapters import load_plugins, registered_adapters

    module, colon, attr = adapter.rpartition(":")
    if not colon:
        load_plugins()
        if adapter not in registered_adapters():
            raise r.fail(keys, f"adapter {adapter!r}: no registered adapter of that name (registered: "
                               f"{sorted(registered_adapters())}); a custom adapter is written "
                               "'package.module:Class' or 'path/to/file.py:Class'")
    elif module.endswith(".py") and not Path(module).expanduser().is_file():
        raise r.fail(keys, f"adapter {adapter!r}: no file {Path(module).expanduser().resolve()} (a relative path "
                           "is taken from the working directory, as --adapter's is)")
    elif not module or not attr:
        raise r.fail(keys, f"adapter {adapter!r}: write 'package.module:Class' or 'path/to/file.py:Class'")


def check_cells(study: Any, r: Any) -> None:
    """Build the study's cells (each folder and record its own, :func:`vrh.study.cells.check_unique`) and
    each cell's settings value (:meth:`vrh.study.cells.CellKind.check`), so the settings' own checks -- the
    command's -- run now; a refusal names the line of the table the cell comes from."""
    from pathlib import Path

    from vrh.study.cells import cell_kind
    from vrh.study.kinds import build_cells

    try:
        cells = build_cells(study)
    except ValueError as e:
        raise r.fail(("models",), str(e)) from None
    for c in cells:
        kind = cell_kind(c.kind)
        try:
            kind.check(c, Path(study.path).parent / "STUDY_DIR")
        except (TypeError, ValueError) as e:
            raise r.fail((kind.table or c.kind,), f"cell {c.id}: {e}") from None


def _data_size(r: Any, d: Any) -> int:
    """The number of ``d.task`` samples in the converted dataset ``d.data``, read as the commands read it
    (before their model loads): a file that is not a vrh dataset of that task is refused now."""
    from vrh.experiments.heldout import load_task_samples

    try:
        samples, _ = load_task_samples(d.data, d.task, hint=f"[{_section(d)}.{d.name}] takes a {d.task} set")
    except (OSError, ValueError) as e:
        raise r.fail((_section(d), d.name, "data"), f"{_section(d)}.{d.name}.data: {e}") from None
    return len(samples)
