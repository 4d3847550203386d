"""``vrh models``: every registered family and every refusal, for people and (``--json``) for machines."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from vrh.models.adapters import registered_adapters
from vrh.models.adapters.refusals import REFUSALS
from vrh.cli import main
from vrh.commands import models

KEYS = {"name", "model_types", "status", "status_detail", "source", "box_convention", "token_layout"}


def _json(capsys, *extra: str) -> list[dict]:
    assert main(["models", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_lists_every_registered_family_and_every_refusal(capsys):
    rows = _json(capsys)
    by_name = {r["name"]: r for r in rows}
    assert len(by_name) == len(rows) == len(registered_adapters()) + len(REFUSALS)
    for name, cls in registered_adapters().items():
        r = by_name[name]
        assert KEYS <= set(r) and r["status"] == "tested" and r["model_types"] == list(cls.model_types)
        assert r["box_convention"] == (getattr(cls, "box_convention", None) or "(not stated)")
    for ref in REFUSALS:
        r = by_name[ref.name]
        assert r["status"] == "refused" and r["status_detail"] == ref.kind
        assert r["reason"] == ref.reason and r["remedy"] == ref.remedy and r["model_types"] == list(ref.model_types)
    statuses = [r["status"] for r in rows]
    assert statuses == sorted(statuses, key=["tested", "custom", "refused"].index)  # tested first, refused last


def test_text_listing_names_types_conventions_and_reasons(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name, cls in registered_adapters().items():
        assert f"{name}  [{', '.join(cls.model_types)}]  tested" in out
    for ref in REFUSALS:
        assert f"{ref.name}  [{', '.join(ref.model_types)}]  refused ({ref.kind})" in out
        assert f"    why:    {ref.reason}\n    do:     {ref.remedy}" in out
    assert out.count("    boxes:  ") == out.count("    tokens: ") == len(registered_adapters()) + len(REFUSALS)


def test_custom_adapter_is_listed_with_its_attributes(tmp_path, capsys):
    plugin = tmp_path / "my_models_plugin.py"
    plugin.write_text("from vrh.models.adapters.llava import LlavaAdapter\n\n"
                      "class Mine(LlavaAdapter):\n"
                      "    name = 'mine'\n    model_types = ('mine_vlm',)\n"
                      "    token_layout = 'one token per 14-px patch of the 336-px crop, row-major'\n")
    rows = {r["name"]: r for r in _json(capsys, "--adapter", f"{plugin}:Mine")}
    mine = rows["mine"]
    assert mine["status"] == "custom" and mine["model_types"] == ["mine_vlm"] and mine["source"].endswith(":Mine")
    from vrh.models.adapters.llava import LlavaAdapter

    assert mine["token_layout"].startswith("one token per 14-px")  # its own
    assert mine["box_convention"] == LlavaAdapter.box_convention  # inherited from the adapter it extends
    assert main(["models", "--adapter", f"{plugin}:Mine"]) == 0
    assert f"    class:  {mine['source']}" in capsys.readouterr().out


def test_bad_adapter_is_a_clear_error(capsys):
    assert main(["models", "--adapter", "no_such_module_y:Cls"]) == 2
    err = capsys.readouterr().err
    assert "vrh models: error: --adapter 'no_such_module_y:Cls': cannot import it" in err


def test_command_module_imports_only_stdlib_and_options_at_module_level():
    """Importing the command (every `vrh --help`) must not import torch or the adapters."""
    tree = ast.parse(Path(models.__file__).read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in top if isinstance(n, ast.ImportFrom)]
    for name in names:
        root = name.split(".")[0]
        assert name in ("__future__", "vrh.infra.options") or root in sys.stdlib_module_names, name
