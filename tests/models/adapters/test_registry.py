"""Which adapter serves a checkpoint: refusals, the custom-adapter API (--adapter, register_adapter,
entry points) and the docs/adapters.md worked example, run as written."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from vrh.models.adapters import (Adapter, adapter_class, describe_adapter, get_adapter, list_families, register_adapter,
                          registered_adapters)
from vrh.models.adapters import base
from vrh.models.adapters.llava import LlavaAdapter
from vrh.models.adapters.refusals import REFUSALS, native_in_transformers

DOC = Path(__file__).resolve().parents[3] / "docs" / "adapters.md"


@pytest.fixture
def isolated_registry(monkeypatch):
    """A copy of the registry for one test, so adapters a test registers do not leak into the shared suite."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))


@pytest.fixture
def no_plugins(monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [])


# --- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda r: r.name)
def test_refused_family_is_one_line_with_reason_and_remedy(refusal, no_plugins):
    for model_type in refusal.model_types:
        with pytest.raises(ValueError) as e:
            get_adapter(model_type)
        msg = str(e.value)
        assert "\n" not in msg and "refused" in msg and repr(model_type) in msg
        assert refusal.reason in msg and refusal.remedy in msg


def test_refusal_kinds_match_what_transformers_defines():
    """A remote-code refusal is only right while transformers lacks the type; a contract refusal is of a
    native family. Fails (so the table gets updated) when transformers adds one of them."""
    for r in REFUSALS:
        for t in r.model_types:
            assert native_in_transformers(t) == (r.kind == "contract"), (r.name, t)
    assert {r.kind for r in REFUSALS} <= {"remote code", "contract"}  # mllama, the last contract one, is served
    assert {"kimi_vl", "phi3_v"} <= {t for r in REFUSALS for t in r.model_types}


def test_unknown_type_not_in_transformers_is_refused_as_remote_code(no_plugins):
    with pytest.raises(ValueError, match="trust_remote_code.*never enables.*--adapter"):
        get_adapter("brand_new_vlm")


def test_native_type_without_adapter_lists_the_supported_ones(no_plugins):
    with pytest.raises(ValueError) as e:
        get_adapter("bert")  # native in transformers, never a vrh family
    msg = str(e.value)
    assert "no vrh adapter for model type 'bert'" in msg and "--adapter" in msg
    for cls in registered_adapters().values():
        assert all(repr(t) in msg for t in cls.model_types)
    with pytest.raises(ValueError, match="states no model_type"):
        get_adapter("")


def test_load_model_refuses_remote_code_without_running_or_prompting(tmp_path, monkeypatch):
    """A remote-code checkpoint is refused from its config.json alone: its code never runs and transformers'
    interactive trust_remote_code prompt never appears."""
    from vrh.models.loading import load_model

    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("vrh asked to run remote code"))
    sentinel = tmp_path / "code_ran"
    for model_type in ("kimi_vl", "unlisted_remote_vlm"):
        ckpt = tmp_path / model_type
        ckpt.mkdir()
        (ckpt / "modeling_x.py").write_text(f"open({str(sentinel)!r}, 'w').write('ran')\n")
        (ckpt / "configuration_x.py").write_text(f"open({str(sentinel)!r}, 'w').write('ran')\n")
        (ckpt / "config.json").write_text(json.dumps({
            "model_type": model_type, "architectures": ["XForCausalLM"],
            "auto_map": {"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XForCausalLM"}}))
        with pytest.raises(ValueError, match="refused.*trust_remote_code"):
            load_model(str(ckpt))
    assert not sentinel.exists()


# --- the custom-adapter API --------------------------------------------------------------------

PLUGIN = '''
from vrh.models.adapters.llava import LlavaAdapter

class Renamed(LlavaAdapter):
    name = "renamed_llava"
    model_types = ("renamed_llava",)
    box_convention = "[x1, y1, x2, y2], original-image pixels"

class NotAnAdapter:
    pass
'''


def test_adapter_spec_forms(tmp_path, monkeypatch):
    (tmp_path / "vrh_test_plugin_a.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert adapter_class("llava") is LlavaAdapter
        by_module = adapter_class("vrh_test_plugin_a:Renamed")
        by_file = adapter_class(f"{tmp_path / 'vrh_test_plugin_a.py'}:Renamed")
        assert by_module.name == by_file.name == "renamed_llava" and issubclass(by_file, LlavaAdapter)
        assert adapter_class(f"{tmp_path / 'vrh_test_plugin_a.py'}:Renamed") is by_file  # imported once
        assert "renamed_llava" not in registered_adapters()  # --adapter needs no registration
        for bad, why in [("no_such_family", "no registered adapter"), ("no_such_module_x:A", "cannot import"),
                         ("vrh_test_plugin_a:Missing", "cannot import"), (f"{tmp_path}/absent.py:A", "cannot import"),
                         ("vrh_test_plugin_a:NotAnAdapter", "not a vrh.models.adapters.Adapter")]:
            with pytest.raises(ValueError, match=re.escape(repr(bad)) + ".*" + why):
                adapter_class(bad)
    finally:
        sys.modules.pop("vrh_test_plugin_a", None)


def test_adapter_override_must_serve_the_model_type():
    assert type(get_adapter("llava", adapter="llava")) is LlavaAdapter
    with pytest.raises(ValueError, match="serves model types \\['llava'\\], not 'qwen2_vl'.*LlavaAdapter.model_types"):
        get_adapter("qwen2_vl", adapter="llava")

    class AnyType(LlavaAdapter):  # a custom class may leave model_types empty: it then serves what it is given
        model_types = ()

    sys.modules["vrh_test_plugin_any"] = SimpleNamespace(AnyType=AnyType)  # importable by name for the spec
    try:
        assert type(get_adapter("deepseek_vl_v2", adapter="vrh_test_plugin_any:AnyType")) is AnyType
    finally:
        del sys.modules["vrh_test_plugin_any"]


def test_entry_point_plugins_register_on_lookup(isolated_registry, monkeypatch):
    import importlib.metadata

    class Plugin(LlavaAdapter):
        name = "plugin_family"
        model_types = ("plugin_vlm", "kimi_vl")  # a plugin may serve a refused family

    eps = [SimpleNamespace(name="plugin_family", value="pkg:Plugin", load=lambda: Plugin)]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: eps if group == "vrh.adapters" else [])
    assert "plugin_family" not in registered_adapters()
    assert type(get_adapter("qwen2_vl")).__name__ == "Qwen2VLAdapter"  # built-ins need no plugin scan
    assert type(get_adapter("plugin_vlm")) is Plugin and type(get_adapter("kimi_vl")) is Plugin
    rows = {r["name"]: r for r in list_families()}
    assert rows["plugin_family"]["status"] == "custom" and "kimi_vl" not in rows  # the refusal gives way
    eps[:] = [SimpleNamespace(name="broken", value="pkg:obj", load=lambda: object())]
    with pytest.raises(ValueError, match="entry point 'broken'.*not a vrh.models.adapters.Adapter"):
        get_adapter("another_vlm")


def test_the_entry_point_group_has_one_name_in_code_and_docs():
    import vrh.models.adapters as adapters_pkg
    from vrh.infra import discovery

    root = DOC.parents[1]
    texts = [DOC.read_text(), (root / "docs" / "architecture.md").read_text(), Path(adapters_pkg.__file__).read_text()]
    named = [g for t in texts for g in re.findall(r'[`"]([\w.]+)[`"]\]?\s+entry[- ]point|entry-points\."([\w.]+)"', t)]
    groups = {a or b for a, b in named}
    # the adapters' group, and the other registries' one (vrh.infra.discovery: scorers, tasks, sources, analyses),
    # each spelled one way wherever it is named
    assert len(named) >= 4 and adapters_pkg.PLUGIN_GROUP in groups, groups
    assert groups <= {adapters_pkg.PLUGIN_GROUP, discovery.PLUGIN_GROUP}, groups


def test_register_adapter_then_model_type_picks_it(isolated_registry):
    class Mine(LlavaAdapter):
        name = "mine"
        model_types = ("mine_vlm",)

    assert register_adapter(Mine) is Mine and type(get_adapter("mine_vlm")) is Mine

    class Clash(Adapter):
        name = "mine"
        model_types = ("other",)

    with pytest.raises(ValueError, match="registered twice"):
        register_adapter(Clash)


def test_describe_reads_class_attributes_else_not_stated():
    class Bare(Adapter):
        name = "bare"
        model_types = ("bare",)

    class Stated(Bare):
        box_convention = "x1,y1,x2,y2 in 0-1000"
        token_layout = "one token per 28-px cell"

    bare, stated = describe_adapter(Bare), describe_adapter(Stated)
    assert bare["box_convention"] == bare["token_layout"] == "(not stated)" and bare["status"] == "custom"
    assert stated["box_convention"] == "x1,y1,x2,y2 in 0-1000" and stated["token_layout"] == "one token per 28-px cell"
    assert describe_adapter(LlavaAdapter)["status"] == "tested"
    assert describe_adapter(LlavaAdapter)["source"] == "vrh.models.adapters.llava:LlavaAdapter"


# --- docs/adapters.md's worked example, as written -----------------------------------------------

def _doc_blocks() -> list[str]:
    text = DOC.read_text()
    section = text.split("## A custom adapter in one small file")[1].split("\n## ")[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_docs_worked_example_runs(tmp_path, monkeypatch, tiny_checkpoint, isolated_registry):
    """The plugin file, load_model(adapter=...) with a greedy answer, and register_adapter, as the page shows
    them, on a tiny Qwen2.5-VL checkpoint whose config.json names its own model type."""
    from vrh.models.loading import load_model

    plugin, use, register = _doc_blocks()
    (tmp_path / "my_vrh_plugin.py").write_text(plugin)
    ckpt = Path(shutil.copytree(tiny_checkpoint, tmp_path / "my-finetune"))
    cfg = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "model_type": "my_qwen_vl"}))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ValueError, match="'my_qwen_vl' is refused"):  # not native, no adapter yet
            load_model("my-finetune")
        ns: dict = {}
        exec(compile(use, str(DOC), "exec"), ns)
        lm = ns["lm"]
        assert type(lm.adapter).__name__ == "MyQwenAdapter" and lm.model.config.model_type == "my_qwen_vl"
        assert lm.adapter.grounding_prompt("cat") == "Find the cat. Reply with its bbox_2d in JSON."
        assert len(ns["answers"]) == 1 and isinstance(ns["answers"][0], str)
        exec(compile(register, str(DOC), "exec"), {})
        assert type(load_model("my-finetune").adapter).__name__ == "MyQwenAdapter"  # the model type now picks it
    finally:
        sys.modules.pop("my_vrh_plugin", None)


FIRST_IMPORTS = ["vrh.models.composed", "vrh.models.adapters.composed_base", "vrh.models.adapters",
                 "vrh.models.adapters.base", "vrh.models.adapters.deepseek_vl2",
                 "vrh.models.adapters.deepseek_vl2.checkpoint",
                 "vrh.models.adapters.deepseek_vl2.modeling", "vrh.models.adapters.deepseek_vl2.processing",
                 "vrh.models.adapters.magma.modeling", "vrh.models.adapters.magma.processing",
                 "vrh.models.adapters.phi4_vision.modeling", "vrh.models.adapters.phi4_vision.processing",
                 "vrh.testing.tiny_magma", "vrh.models.inspect"]


@pytest.mark.parametrize("first", FIRST_IMPORTS)
def test_every_family_registers_whichever_module_is_imported_first(first):
    """The composed families subclass ComposedAdapter, which lived outside the adapters package and imported it:
    imported first, it was a circular import (worked around by deferring the families). It lives in the package
    now (composed_base), so whichever module is imported first, every family registers as the package is imported."""
    import subprocess
    import sys

    # the base registry itself, read with no lookup function between (the deferral registered the skipped
    # families only on a lookup through the package: with vrh.models.composed first, three were missing here)
    code = (f"import importlib; importlib.import_module({first!r}); "
            "from vrh.models.adapters.base import registered_adapters; print(sorted(registered_adapters()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from vrh.models.adapters import registered_adapters

    builtin = sorted(n for n, c in registered_adapters().items() if c.__module__.startswith("vrh.models.adapters."))
    assert out.stdout.strip() == str(builtin)
