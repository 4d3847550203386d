"""A checkpoint never runs its own code (issue 45 item 1), and what vrh checks of a checkpoint before loading it.

Every family's tiny checkpoint gets an ``auto_map`` planted in each file transformers reads one from, pointing at
planted ``*_evil.py`` modules that would write a sentinel file when imported. vrh must refuse the folder in one
line naming the file, before transformers is asked (:mod:`vrh.models.preflight`), never prompt on the terminal
(``input`` fails the test), and never run the code. With that check switched off, ``trust_remote_code=False``
alone must still keep the code from running and the prompt from appearing (what transformers does with it).
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from vrh.models import preflight
from vrh.models.adapters import get_adapter
from vrh.models.loading import load_model
from vrh.testing import TINY_BUILDERS, save_tiny

SRC = Path(__file__).resolve().parents[2] / "src" / "vrh"
FAMILIES = sorted(TINY_BUILDERS)
# what each file's auto_map names: the Auto classes that read that file, each pointing at a planted module
EVIL_MAPS = {
    "config.json": {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel",
                    "AutoModelForCausalLM": "modeling_evil.EvilModel",
                    "AutoModelForImageTextToText": "modeling_evil.EvilModel",
                    "AutoProcessor": "processing_evil.EvilProcessor",
                    "AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]},
    "processor_config.json": {"AutoProcessor": "processing_evil.EvilProcessor"},
    "preprocessor_config.json": {"AutoProcessor": "processing_evil.EvilProcessor",
                                 "AutoImageProcessor": "image_processing_evil.EvilImageProcessor"},
    "video_preprocessor_config.json": {"AutoProcessor": "processing_evil.EvilProcessor",
                                       "AutoVideoProcessor": "video_processing_evil.EvilVideoProcessor"},
    "tokenizer_config.json": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None],
                              "AutoProcessor": "processing_evil.EvilProcessor"},
    "audio_tokenizer_config.json": {"AutoProcessor": "processing_evil.EvilProcessor"},
}
# the class names that make transformers look for the code (a processor_class / tokenizer_class it does not define)
EVIL_CLASSES = {"tokenizer_config.json": {"tokenizer_class": "EvilTokenizer", "processor_class": "EvilProcessor"},
                "processor_config.json": {"processor_class": "EvilProcessor"},
                "preprocessor_config.json": {"processor_class": "EvilProcessor"},
                "video_preprocessor_config.json": {"processor_class": "EvilProcessor"},
                "audio_tokenizer_config.json": {"processor_class": "EvilProcessor"}}
MODULES = ("configuration_evil", "modeling_evil", "processing_evil", "image_processing_evil",
           "video_processing_evil", "tokenization_evil")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """family -> its tiny checkpoint folder, built once per family."""
    cache: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in cache:
            model, processor = TINY_BUILDERS[family]()
            cache[family] = save_tiny(model, processor, tmp_path_factory.mktemp(family) / "ckpt")
        return cache[family]

    return get


def plant(folder: Path, name: str, sentinel: Path) -> Path:
    """``folder/name`` with the evil auto_map and class names (merged into the file where it exists) and the evil
    modules."""
    for module in MODULES:
        (folder / f"{module}.py").write_text(f"open({str(sentinel)!r}, 'w').write('ran')\n", encoding="utf-8")
    file = folder / name
    data = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    file.write_text(json.dumps({**data, **EVIL_CLASSES.get(name, {}), "auto_map": EVIL_MAPS[name]}), encoding="utf-8")
    return file


@pytest.fixture
def no_prompt(monkeypatch):
    """Any terminal prompt fails the test (pytest.fail raises past every ``except Exception``)."""
    monkeypatch.setattr("builtins.input", lambda *a, **k: pytest.fail(f"vrh prompted on the terminal: {a}"))


def test_the_files_are_every_one_transformers_reads_an_auto_map_from():
    from transformers.tokenization_utils_base import TOKENIZER_CONFIG_FILE
    from transformers.utils import (AUDIO_TOKENIZER_NAME, CONFIG_NAME, FEATURE_EXTRACTOR_NAME, IMAGE_PROCESSOR_NAME,
                                    PROCESSOR_NAME, VIDEO_PROCESSOR_NAME)

    read = {CONFIG_NAME, PROCESSOR_NAME, FEATURE_EXTRACTOR_NAME, IMAGE_PROCESSOR_NAME, VIDEO_PROCESSOR_NAME,
            TOKENIZER_CONFIG_FILE, AUDIO_TOKENIZER_NAME}
    assert read == set(preflight.REMOTE_CODE_FILES) == set(EVIL_MAPS)


@pytest.mark.parametrize("name", sorted(EVIL_MAPS))
@pytest.mark.parametrize("family", FAMILIES)
def test_a_planted_auto_map_is_refused_in_one_line_and_never_runs(family, name, saved, tmp_path, no_prompt):
    folder = shutil.copytree(saved(family), tmp_path / "ckpt")
    sentinel = tmp_path / "code_ran"
    file = plant(folder, name, sentinel)
    if name in get_adapter(family).ported_remote_code:  # vrh's port reads this file itself: the auto_map is inert
        loaded = load_model(str(folder))
        assert loaded.adapter.name == family
    else:
        with pytest.raises(preflight.RemoteCodeRefused) as e:
            load_model(str(folder))
        line = str(e.value)
        assert "\n" not in line and line.startswith(f"{file} names remote code (auto_map: ")
        assert line.endswith("vrh never runs a checkpoint's own code")
    assert not sentinel.exists()


@pytest.mark.parametrize("name", sorted(EVIL_MAPS))
@pytest.mark.parametrize("family", FAMILIES)
def test_trust_remote_code_false_alone_keeps_the_code_from_running(family, name, saved, tmp_path, no_prompt,
                                                                   monkeypatch):
    """The check switched off: every from_pretrained vrh calls still says trust_remote_code=False, so transformers
    refuses (or ignores the file) instead of prompting, and nothing planted runs."""
    monkeypatch.setattr(preflight, "refuse_remote_code", lambda *a, **k: None)
    folder = shutil.copytree(saved(family), tmp_path / "ckpt")
    sentinel = tmp_path / "code_ran"
    plant(folder, name, sentinel)
    try:
        load_model(str(folder))
    except (ValueError, OSError, TypeError, AttributeError, KeyError, ImportError):
        pass  # transformers' own refusal (or a file it cannot use): what matters is below
    assert not sentinel.exists()


def test_a_custom_generate_is_refused(saved, tmp_path, no_prompt):
    folder = shutil.copytree(saved("llava"), tmp_path / "ckpt")
    (folder / "custom_generate").mkdir()
    (folder / "custom_generate" / "generate.py").write_text("raise SystemExit('ran')\n", encoding="utf-8")
    with pytest.raises(preflight.RemoteCodeRefused, match=r"custom_generate/generate.py is a checkpoint's own"):
        load_model(str(folder))


def test_inspect_refuses_a_planted_auto_map(saved, tmp_path, no_prompt):
    from vrh.models.inspect import inspect_checkpoint

    folder = shutil.copytree(saved("llava"), tmp_path / "ckpt")
    sentinel = tmp_path / "code_ran"
    plant(folder, "processor_config.json", sentinel)
    with pytest.raises(preflight.RemoteCodeRefused, match="processor_config.json names remote code"):
        inspect_checkpoint(str(folder))
    assert not sentinel.exists()


def _from_pretrained_calls() -> list[tuple[str, int, ast.Call]]:
    """Every ``X.from_pretrained(...)`` call in src/vrh whose receiver is not a class vrh defines itself."""
    files = sorted(SRC.rglob("*.py"))
    trees = {f: ast.parse(f.read_text(encoding="utf-8")) for f in files}
    own = {node.name for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
           and any(isinstance(d, ast.FunctionDef) and d.name == "from_pretrained" for d in node.body)}
    calls = []
    for f, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "from_pretrained":
                receiver = node.func.value
                if isinstance(receiver, ast.Name) and receiver.id in own:
                    continue  # vrh's own processors: they call transformers' from_pretrained, checked here too
                calls.append((str(f.relative_to(SRC)), node.lineno, node))
    return calls


def test_every_from_pretrained_call_says_trust_remote_code_false():
    calls = _from_pretrained_calls()
    assert len(calls) >= 15  # the loaders are found at all
    missing = [f"{f}:{line}" for f, line, call in calls
               if not any(k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is False
                          for k in call.keywords)]
    assert not missing, f"from_pretrained without trust_remote_code=False: {missing}"


TRUSTING = '''
from vrh.models.adapters.llava import LlavaAdapter


class Trusting(LlavaAdapter):
    name = "trusting_llava"
    runs_remote_code = True  # the user's explicit opt-in, in their own file
'''


def test_a_custom_adapter_that_opts_in_is_not_refused(saved, tmp_path, monkeypatch, no_prompt):
    """docs/adapters.md: a custom adapter that says ``runs_remote_code = True`` is the user's choice; the check
    steps aside (its load() then decides what to trust; this one, LLaVA's, still says False)."""
    (tmp_path / "trusting_adapter.py").write_text(TRUSTING, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = shutil.copytree(saved("llava"), tmp_path / "ckpt")
    data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**data, "auto_map": {"AutoConfig": "c.C"}}), encoding="utf-8")
    with pytest.raises(preflight.RemoteCodeRefused):
        load_model(str(folder))
    assert load_model(str(folder), adapter="trusting_adapter:Trusting").adapter.name == "trusting_llava"


# --- hostile checkpoints: one line each, sizes checked before anything is allocated (issue 45 items 13, 14) ----

def _json_edit(name, change):
    def edit(folder: Path) -> None:
        file = folder / name
        file.write_text(json.dumps(change(json.loads(file.read_text(encoding="utf-8")))), encoding="utf-8")
    return edit


def _write(name, text):
    return lambda folder: (folder / name).write_text(text, encoding="utf-8")


def _header(folder: Path, change) -> None:
    """model.safetensors with its header rewritten by ``change(header) -> header`` (the data left as it is)."""
    file = folder / "model.safetensors"
    raw = file.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.dumps(change(json.loads(raw[8:8 + n]))).encode()
    file.write_bytes(len(header).to_bytes(8, "little") + header + raw[8 + n:])


def _claim_more(header: dict) -> dict:
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [d * 1000 for d in header[name]["shape"]]
    return header


def _past_the_end(header: dict) -> dict:
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"] = [0, 2**40]
    return header


def _sparse_tokenizer(folder: Path) -> None:
    with open(folder / "tokenizer.json", "r+b") as f:
        f.truncate(1_500_000_000)  # a sparse 1.5 GB file: no disk used, and reading it would take 1.5 GB


HOSTILE = {
    "config a list": (_write("config.json", "[1, 2]"), "config.json holds an array, not an object"),
    "model_type a list": (_json_edit("config.json", lambda c: {**c, "model_type": ["llava"]}),
                          "config.json: model_type is an array, not a string"),
    "hidden_size 2^40": (_json_edit("config.json", lambda c: {**c, "text_config": {**c["text_config"],
                                                                                    "hidden_size": 2**40}}),
                         "config.json: text_config.hidden_size is 1099511627776, more than the 65536"),
    "max_position_embeddings 1e11": (
        _json_edit("config.json", lambda c: {**c, "text_config": {**c["text_config"],
                                                                  "max_position_embeddings": 1e11}}),
        "config.json: text_config.max_position_embeddings is 100000000000.0, not an integer size"),
    "max_position_embeddings 10**11": (
        _json_edit("config.json", lambda c: {**c, "vision_config": {**c["vision_config"],
                                                                    "max_position_embeddings": 10**11}}),
        "config.json: vision_config.max_position_embeddings is 100000000000, more than the 16777216"),
    "negative layers": (_json_edit("config.json", lambda c: {**c, "text_config": {**c["text_config"],
                                                                                   "num_hidden_layers": -3}}),
                        "text_config.num_hidden_layers is -3, a negative size"),
    "config nested 1,000 deep": (_write("config.json", '{"model_type": "llava", "x": ' + "[" * 1000 + "]" * 1000 + "}"),
                                 "config.json is not valid JSON (nested more than 32 levels deep"),
    "config not UTF-8": (lambda f: (f / "config.json").write_bytes(b'{"model_type": "\xff"}'),
                         "config.json is not UTF-8"),
    "a LLaVA config typed phi4-siglip": (_json_edit("config.json", lambda c: {**c, "model_type": "phi4-siglip"}),
                                         "config.json does not describe a phi4_reasoning_vision checkpoint"),
    "safetensors header too large": (lambda f: (f / "model.safetensors").write_bytes((2**62).to_bytes(8, "little")),
                                     "model.safetensors: not a safetensors file (its header claims"),
    "safetensors claims a bigger tensor": (lambda f: _header(f, _claim_more),
                                           "claims a dtype, shape or byte range that the file does not hold"),
    "safetensors offsets past the end": (lambda f: _header(f, _past_the_end),
                                         "claims a dtype, shape or byte range that the file does not hold"),
    "safetensors header a list": (lambda f: _header(f, lambda h: [1]),
                                  "model.safetensors: its safetensors header is an array, not an object"),
    "tokenizer 1.5 GB": (_sparse_tokenizer, "tokenizer.json is 1,500,000,000 bytes, more than the 268,435,456"),
    "tokenizer a list": (_write("tokenizer.json", "[]"), "tokenizer.json holds an array, not an object"),
    "tokenizer not JSON": (_write("tokenizer.json", '{"model": '), "tokenizer.json is not valid JSON"),
    "weight index escapes the folder": (_write("model.safetensors.index.json",
                                               '{"weight_map": {"a": "../../elsewhere.safetensors"}}'),
                                        "weight_map is not an object of tensor name -> a file name in this folder"),
    "vrh.json a list": (_write("vrh.json", "[1]"), "vrh.json holds an array, not an object"),
    "preprocessor config a list": (_write("preprocessor_config.json", "[1]"),
                                   "preprocessor_config.json holds an array, not an object"),
    "deltas manifest {}": (lambda f: ((f / "vrh_deltas.json").write_text("{}"), (f / "model.safetensors").unlink()),
                           "vrh_deltas.json: base is missing, not an object with sha256 and version strings"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_checkpoint_is_one_line_naming_its_file(case, saved, tmp_path, no_prompt):
    folder = shutil.copytree(saved("llava"), tmp_path / "ckpt")
    spoil, message = HOSTILE[case]
    spoil(folder)
    with pytest.raises((ValueError, OSError)) as e:
        load_model(str(folder))
    line = str(e.value)
    assert "\n" not in line and str(folder) in line and message in line, line


@pytest.mark.parametrize("family, name", [("magma", "preprocessor_config.json"),
                                          ("deepseek_vl2", "processor_config.json")])
def test_a_composed_familys_processor_file_of_another_type_is_one_line(family, name, saved, tmp_path, no_prompt):
    folder = shutil.copytree(saved(family), tmp_path / "ckpt")
    (folder / name).write_text("[1]", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        load_model(str(folder))
    assert str(e.value) == f"{folder / name} holds an array, not an object"
