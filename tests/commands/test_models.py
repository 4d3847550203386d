"""``vrh models``: every registered family and every refusal, for people and (``--json``) for machines."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from vrh.models.adapters import registered_adapters
from vrh.models.answer_formats import declared
from vrh.models.adapters.composed_base import ComposedAdapter
from vrh.models.adapters.refusals import REFUSALS
from vrh.cli import main
from vrh.commands import models

KEYS = {"name", "model_types", "status", "status_detail", "source", "box_convention", "token_layout", "answer_formats"}
COMPOSED = ("deepseek_vl2", "magma", "phi4_reasoning_vision")  # built by vrh from native parts (no transformers class)


def _status(cls) -> str:
    return "composed" if issubclass(cls, ComposedAdapter) else "tested"


def _json(capsys, *extra: str) -> list[dict]:
    assert main(["models", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_lists_every_registered_family_and_every_refusal(capsys):
    rows = _json(capsys)
    by_name = {r["name"]: r for r in rows}
    assert len(by_name) == len(rows) == len(registered_adapters()) + len(REFUSALS)
    for name, cls in registered_adapters().items():
        r = by_name[name]
        assert KEYS <= set(r) and r["status"] == _status(cls) and r["model_types"] == list(cls.model_types)
        assert r["answer_formats"] == [f.name for f in declared(cls)] and r["answer_formats"][0] == "native"
        assert r["box_convention"] == (getattr(cls, "box_convention", None) or "(not stated)")
    for ref in REFUSALS:
        r = by_name[ref.name]
        assert r["status"] == "refused" and r["status_detail"] == ref.kind
        assert r["reason"] == ref.reason and r["remedy"] == ref.remedy and r["model_types"] == list(ref.model_types)
    statuses = [r["status"] for r in rows]
    assert statuses == sorted(statuses, key=["tested", "composed", "custom", "refused"].index)  # refused last


def _table(capsys, monkeypatch, columns: int, *extra: str) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))  # the table's width (a terminal's, or COLUMNS)
    assert main(["models", *extra]) == 0
    return capsys.readouterr().out


def read_table(out: str, columns: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The table whose header names ``columns``, as first cell -> cells, each cell's wrapped pieces joined
    without white space (a folded cell may split inside a word)."""
    lines = out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.split() == " ".join(columns).split())
    starts = [lines[top].index(c) for c in columns] + [None]
    rows: list[list[str]] = []
    for line in lines[top + 2:]:  # past the header's rule
        if not line.strip():
            break
        cells = [line[a:b] if b else line[a:] for a, b in zip(starts, starts[1:])]
        if cells[0].strip():
            rows.append(["" for _ in columns])
        for i, piece in enumerate(cells):
            rows[-1][i] += "".join(piece.split())
    return {r[0]: tuple(r[1:]) for r in rows}


FAMILY_COLUMNS = models.FAMILY_COLUMNS


def _squeezed(*cells: str) -> tuple[str, ...]:
    return tuple("".join(c.split()) for c in cells)


@pytest.mark.parametrize("columns", [1000, 100, 80])
def test_text_listing_is_a_table_of_types_status_boxes_and_layouts(capsys, monkeypatch, columns):
    out = _table(capsys, monkeypatch, columns)
    assert max(len(line) for line in out.splitlines()) <= columns
    table = read_table(out, FAMILY_COLUMNS)
    assert len(table) == len(registered_adapters()) + len(REFUSALS)
    for name, cls in registered_adapters().items():
        assert table[name] == _squeezed(", ".join(cls.model_types), _status(cls), cls.box_convention, cls.token_layout)
    refused = read_table(out, models.REFUSED_COLUMNS)
    for ref in REFUSALS:
        assert table[ref.name] == _squeezed(", ".join(ref.model_types), "refused", ref.box_convention, ref.token_layout)
        assert refused[ref.name] == _squeezed(ref.kind, ref.reason, ref.remedy)
    assert "".join(models.TESTED_NOTE.split()) in "".join(out.split())
    if columns < 100:  # the model types' longest words and the two wide headers do not fit: they fold
        return
    # a model type is not cut mid-word ("deepseek_vl_" over "v2" at 100 columns, issue 37 item 14)
    types = {t for cls in registered_adapters().values() for t in cls.model_types} | {
        t for ref in REFUSALS for t in ref.model_types}
    start = next(line for line in out.splitlines() if line.split()[:2] == ["family", "model"]).index("model types")
    pieces = {piece.strip(",") for line in out.splitlines() for piece in line[start:start + 20].split()[:2]}
    assert all(t in pieces for t in types), sorted(types - pieces)


def test_composed_families_say_what_the_cpu_verified_and_what_needs_the_real_weights(capsys, monkeypatch):
    """DeepSeek-VL2, Magma and Phi-4-RV have no transformers class: their status says what the CPU tests checked
    (tiny build, strict loading of the published key names, shared suite), what only a GPU with the real weights
    can (logit parity with the remote code, the answer format), and where the published config was seen in part."""
    rows = {r["name"]: r for r in _json(capsys)}
    assert sorted(n for n, r in rows.items() if r["status"] == "composed") == sorted(COMPOSED)
    for name in COMPOSED:
        r = rows[name]
        assert "tiny random-init build" in r["verified_on_cpu"] and "published key names" in r["verified_on_cpu"]
        assert "shared adapter suite" in r["verified_on_cpu"]
        assert "logit parity against the remote code" in r["needs_gpu"] and "answer format" in r["needs_gpu"]
        assert r["verified_on_cpu"] in r["status_detail"] and r["needs_gpu"] in r["status_detail"]
    assert "excerpt that stops" in rows["deepseek_vl2"]["config_gaps"]
    assert "vocab_size" in rows["magma"]["config_gaps"]
    assert "composed" not in {r["status"] for n, r in rows.items() if n not in COMPOSED}
    monkeypatch.setenv("COLUMNS", "1000")
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in COMPOSED:
        block = out[out.index(f"  {name}\n    verified on CPU:"):]
        assert block.splitlines()[1] == f"    verified on CPU: {rows[name]['verified_on_cpu']}"
        assert block.splitlines()[2] == f"    needs a GPU with the real weights: {rows[name]['needs_gpu']}"
        assert block.splitlines()[3] == f"    published files seen only in part: {rows[name]['config_gaps']}"
        assert f"  {name}: {', '.join(rows[name]['answer_formats'])}" in out.splitlines()  # its variants
    assert "".join(models.COMPOSED_NOTE.split()) in "".join(out.split())
    native_only = next(line for line in out.splitlines() if line.startswith("  native only: "))
    assert "qwen2_5_vl" in native_only.split(": ")[1].split(", ")


def test_custom_adapter_is_listed_with_its_attributes(tmp_path, capsys, monkeypatch):
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
    monkeypatch.setenv("COLUMNS", "1000")
    assert main(["models", "--adapter", f"{plugin}:Mine"]) == 0
    out = capsys.readouterr().out
    assert read_table(out, FAMILY_COLUMNS)["mine"] == _squeezed("mine_vlm", "custom", mine["box_convention"],
                                                                mine["token_layout"])
    assert f"custom: mine is {mine['source']} (not tested by vrh)" in out


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
        assert name in ("__future__", "vrh.options") or root in sys.stdlib_module_names, name


def test_inspect_prints_the_structure_and_the_visual_tokens(capsys):
    """``--inspect`` through the CLI: the text says what the library found, ``--json`` gives the same values."""
    from vrh.models.inspect import inspect_checkpoint

    found = inspect_checkpoint("organism", image_sizes=((64, 48),))
    assert main(["models", "--inspect", "organism", "--image-size", "64x48"]) == 0
    assert capsys.readouterr().out.strip() == found.format()
    data = _json(capsys, "--inspect", "organism", "--image-size", "64x48")
    assert data["total_heads"] == data["num_layers"] * data["num_heads"] == found.total_heads
    assert data["attention_modules"] == found.attention_modules
    (v,) = data["visual"]
    assert (v["width"], v["height"], v["tokens"], v["cells"]) == (64, 48, found.visual[0].tokens, found.visual[0].cells)
    assert v["tokens"] > 0


REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "real" / "checkpoints"


@pytest.mark.skipif(not REAL.is_dir(), reason="the real checkpoint files (../shared/real) are absent")
@pytest.mark.parametrize("folder, size, heads, counted", [
    ("internvl3_8b_hf", "1792x1344", "28 layers x 28 heads = 784", "3,328 visual tokens, 3,072 of them cells"),
    ("qwen2_5_vl_7b", "640x480", "28 layers x 28 heads = 784", "391 visual tokens, 391 of them cells"),
    ("llama3_llava_next_8b_hf", "640x480", "32 layers x 32 heads = 1,024", "2,340 visual tokens, 1,728 of them cells"),
], ids=["internvl3_8b_hf", "qwen2_5_vl_7b", "llama3_llava_next_8b_hf"])
def test_inspect_counts_a_config_only_real_folder(capsys, folder, size, heads, counted):
    """The shared folders carry configs and no tokenizer (a config-only download): the CLI counts their visual
    tokens with the family's stand-in tokenizer and says so (figures: ../shared/real/SOURCES.md, paper App. I)."""
    from vrh.models.inspect import STAND_IN_NOTE

    assert main(["models", "--inspect", str(REAL / folder), "--image-size", size]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("LM heads") and heads in line for line in lines), lines
    (line,) = [line for line in lines if line.startswith(f"image {size}")]
    assert line.split(None, 2)[2] == f"{counted} ({STAND_IN_NOTE})"


def test_inspect_without_a_stand_in_says_it_did_not_count(tmp_path, capsys):
    """A custom adapter has no tiny build, hence no stand-in: a folder without tokenizer files is not counted."""
    import shutil

    from vrh.models.inspect import TOKENIZER_DEFINITIONS, TOKENIZER_FILES
    from vrh.testing.builders import TINY_BUILDERS
    from vrh.testing.tiny_models import save_tiny

    whole = save_tiny(*TINY_BUILDERS["qwen2_5_vl"](), tmp_path / "whole")
    shutil.copytree(whole, tmp_path / "bare", ignore=shutil.ignore_patterns(*TOKENIZER_FILES, *TOKENIZER_DEFINITIONS))
    (tmp_path / "my_inspect_plugin.py").write_text(
        "from vrh.models.adapters.qwen_vl import Qwen2_5_VLAdapter\n\n"
        "class Mine(Qwen2_5_VLAdapter):\n    name = 'mine'\n")
    argv = ["models", "--inspect", str(tmp_path / "bare"), "--image-size", "64x48"]
    assert main([*argv, "--adapter", f"{tmp_path / 'my_inspect_plugin.py'}:Mine"]) == 0
    out = capsys.readouterr().out
    assert (f"image 64x48  visual tokens not counted: {tmp_path / 'bare'} has no tokenizer files" in out
            and "family 'mine' has no stand-in tokenizer (no tiny build)" in out), out
    assert main(argv) == 0  # the built-in adapter of the same folder has one
    assert "visual tokens, " in capsys.readouterr().out


def test_inspect_errors_are_one_line(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    for argv, said in [(["--inspect", "some-org/not-cached"], "is not in the local Hugging Face cache"),
                       (["--inspect", "organism", "--image-size", "64"], "expected WIDTHxHEIGHT"),
                       (["--image-size", "64x64"], "--image-size and --revision go with --inspect")]:
        assert main(["models", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("vrh models: error: ") and said in err and err.count("\n") == 1, err
