"""The checks of a study file that need vrh's registries or the models' configs (no weights): scorer and
method specs, mask modes, source names, names that refer to the study's own models and benchmarks, the
detection split against the benchmark sizes, and every k against each model's head grid (room for k
random heads outside the top-k, :func:`vrh.experiments.conditions.check_room`). Each failure names the
line of the study file (:meth:`vrh.study.spec._Reader.fail`)."""

from __future__ import annotations

from typing import Any

MIN_COMPARE_SEEDS = 3  # vrh compare's own rule (commands/compare.py MIN_SEEDS)


def check_study(study: Any, r: Any) -> tuple[dict[str, tuple[int, int]], tuple[tuple[str, str], ...]]:
    """Raise :class:`vrh.study.spec.StudyError` on the first problem; return the models' grids and the
    resolved transfer pairs (ordered: A's heads into B)."""
    from vrh.core.masking import mask_mode_names
    from vrh.data.sources import get_source
    from vrh.experiments.conditions import check_room
    from vrh.experiments.detection import check_scorers
    from vrh.study.backbones import backbone, shared_backbone_pairs

    p = study.protocol
    models = [m.name for m in study.models]
    benchmarks = [b.name for b in study.benchmarks]
    for d in (*study.benchmarks, *study.vqa):
        if d.kind == "source":
            try:
                get_source(d.source)
            except ValueError as e:
                raise r.fail((_section(d), d.name, "source"), str(e)) from None

    def names(table: str, key: str, known: list[str], what: str) -> None:
        if table not in p or key not in p[table]:
            return
        value = p[table][key]
        for v in ([value] if isinstance(value, str) else value):
            if v not in known:
                raise r.fail((table, key), f"{table}.{key}: {v!r} is not one of the study's {what} {known}")

    for table in p:
        names(table, "models", models, "models")
        names(table, "benchmark", benchmarks, "grounding benchmarks")
        names(table, "benchmarks", benchmarks, "grounding benchmarks")
    if "crosstask" in p and not study.vqa:
        raise r.fail(("crosstask",), "[crosstask] evaluates the VQA sets, and the study has none ([vqa.NAME])")

    det = p["detection"]
    try:
        check_scorers(det["scorers"], det["seed"])
    except ValueError as e:
        raise r.fail(("detection", "scorers"), f"detection.scorers: {e}") from None
    if "compare" in p and p["compare"]["methods"] is not None:
        try:
            check_scorers(p["compare"]["methods"])
        except ValueError as e:
            raise r.fail(("compare", "methods"), f"compare.methods: {e}") from None
    if "sweep" in p and p["sweep"]["mask_mode"] not in mask_mode_names():
        raise r.fail(("sweep", "mask_mode"), f"sweep.mask_mode {p['sweep']['mask_mode']!r}: one of "
                                             f"{list(mask_mode_names())}")
    for table in ("sweep", "crosstask", "compare", "transfer"):
        if table in p and not p[table]["seeds"]:
            raise r.fail((table, "seeds"), f"{table}.seeds: the random control needs at least one seed")
    if "compare" in p and len(set(p["compare"]["seeds"])) < MIN_COMPARE_SEEDS:
        raise r.fail(("compare", "seeds"), f"compare.seeds: at least {MIN_COMPARE_SEEDS} distinct seeds")
    for d in study.benchmarks:
        size = d.n if d.kind == "world" else d.limit if d.kind == "source" else _count_lines(d.data)
        if size is not None and det["n"] >= size:
            raise r.fail(("detection", "n"), f"detection.n {det['n']} leaves no held-out samples in benchmark "
                                             f"{d.name!r} ({size} samples)")

    grids, backbones = {}, {}
    for m in study.models:
        try:
            backbones[m.name] = backbone(m.model)
        except (OSError, ValueError) as e:
            raise r.fail(("models", m.name), f"model {m.name}: {e}") from None
        grids[m.name] = backbones[m.name].grid
    ks = {("sweep", "ks"): p.get("sweep", {}).get("ks", []), ("compare", "ks"): p.get("compare", {}).get("ks", [])}
    for table in ("crosstask", "transfer", "stability", "dpo_pairs"):
        if table in p:
            ks[(table, "k")] = [p[table]["k"]]
    for (table, key), values in ks.items():
        for name in p.get(table, {}).get("models") or models:
            L, H = grids[name]
            for k in values:
                if not isinstance(k, int) or (key == "k" and k < 1):
                    raise r.fail((table, key), f"{table}.{key}: {k!r} must be an integer >= {1 if key == 'k' else 0}")
                try:
                    check_room(k, L, H, f"{table}.{key}")
                except ValueError as e:
                    raise r.fail((table, key), f"model {name}: {e}") from None

    pairs: tuple[tuple[str, str], ...] = ()
    if "transfer" in p:
        given = p["transfer"]["pairs"]
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
            if grids[a] != grids[b]:
                raise r.fail(("transfer", "pairs"), f"transfer {a} -> {b}: different layer x head grids "
                                                    f"{grids[a]} and {grids[b]}")
        both = p["transfer"]["both_directions"]
        pairs = tuple(dict.fromkeys([*found, *((b, a) for a, b in found if both)]))
    return grids, pairs


def _section(d: Any) -> str:
    return "vqa" if d.task == "vqa" else "benchmarks"


def _count_lines(path: str) -> int:
    with open(path) as f:
        return sum(1 for line in f if line.strip())
