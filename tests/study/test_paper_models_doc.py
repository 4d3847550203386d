"""docs/study.md's table of the paper's 11 models agrees with the data and the registry: one row per paper model,
every hub id the report matches (``hub_ids``) in its row, and each row's family and status as ``vrh models`` has
them (a composed family says what the CPU verified and that it needs a GPU with the real weights)."""

from __future__ import annotations

from pathlib import Path

from vrh.models.adapters import list_families
from vrh.report.paper import paper_numbers

DOC = Path(__file__).resolve().parents[2] / "docs" / "study.md"


def _rows() -> dict[str, list[str]]:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    top = lines.index("| paper model | hub id (`hub_ids`) | vrh family | status |")
    rows = {}
    for line in lines[top + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_every_paper_model_has_a_row_with_its_hub_ids_family_and_status():
    p = paper_numbers()
    rows = _rows()
    assert set(rows) == set(p["models_A7"]) | set(p["all_models_A12"]["models"]) and len(rows) == 11
    families = {r["name"]: r["status"] for r in list_families()}
    for model, (ids, family, status) in rows.items():
        for hub_id in p["hub_ids"].get(model, []):
            assert f"`{hub_id}`" in ids, (model, hub_id)
        if model not in p["hub_ids"]:
            assert ids.startswith("none"), model
        name = family.strip("`")
        assert status.startswith(families[name]), (model, families[name], status)
        if families[name] == "composed":
            assert "verified on CPU" in status and "needs a GPU with the real weights" in status


def test_the_three_composed_families_are_paper_models_the_report_can_match():
    p, rows = paper_numbers(), _rows()
    composed = {r["name"] for r in list_families() if r["status"] == "composed"}
    by_family = {family.strip("`"): model for model, (_, family, _) in rows.items()}
    assert composed == {"magma", "deepseek_vl2", "phi4_reasoning_vision"} <= set(by_family)
    assert all(p["hub_ids"].get(by_family[f]) for f in composed)  # a study of each is matched to Tab. A12
