"""``vrh.models.inspect``: a checkpoint built on the meta device from its config, its heads and its visual tokens.

The real-config tests read ``../shared/real/checkpoints`` (skipped where it is absent). Those folders hold the
published config and processor files but no tokenizer (too large to share), as a config-only download does, so
inspect counts their visual tokens with the family's stand-in tokenizer (``vrh.testing.builders.
stand_in_tokenizer``: the tiny build's, which carries the family's special tokens): the count is the processor's
expansion of the image placeholder, set by the image processor and processor configs, not by the vocabulary
(``test_inspect_real_tokenizers.py`` gets the same counts with the real vocabularies). Expected figures: paper
Table A7 (784 heads) and App. I (3,328 InternVL3 tokens at 1792x1344), and ``../shared/real/SOURCES.md``.
"""

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import constants

from vrh.models.inspect import (STAND_IN_NOTE, TOKENIZER_DEFINITIONS, TOKENIZER_FILES, inspect_checkpoint,
                                parse_image_size)
from vrh.testing.builders import TINY_BUILDERS, stand_in_tokenizer
from vrh.testing.tiny_models import save_tiny

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "real" / "checkpoints"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason="the real checkpoint files (../shared/real) are absent")

# folder, adapter, layers, heads, head dim, {(W, H): (visual tokens, cells)}
CASES = [
    ("qwen2_5_vl_7b", "qwen2_5_vl", 28, 28, 128,
     {(448, 448): (256, 256), (640, 480): (391, 391), (1792, 1344): (3072, 3072)}),
    ("internvl3_8b_hf", "internvl", 28, 28, 128,
     {(448, 448): (256, 256), (640, 480): (3328, 3072), (1792, 1344): (3328, 3072)}),
    ("llama3_llava_next_8b_hf", "llava_next", 32, 32, 128,
     {(448, 448): (2928, 2304), (640, 480): (2340, 1728), (1792, 1344): (2340, 1728)}),
]


def current_files(folder: str, dest: Path) -> Path:
    """The real folder's current files (the reconstructed LLaVA-NeXT processor config under its real name, as
    SOURCES.md's figures assume): a config-only download, no tokenizer files."""
    dest.mkdir()
    for f in (REAL / folder).iterdir():
        if "first_release" not in f.name and "475-byte" not in f.name:  # the current files only
            shutil.copy(f, dest / f.name.replace(".RECONSTRUCTED", ""))
    return dest


@needs_real
@pytest.mark.parametrize("folder, family, layers, heads, head_dim, counts", CASES, ids=[c[0] for c in CASES])
def test_real_configs_give_the_published_figures(tmp_path, folder, family, layers, heads, head_dim, counts):
    path = current_files(folder, tmp_path / folder)
    found = inspect_checkpoint(str(path), image_sizes=tuple(counts), stand_in=stand_in_tokenizer)
    assert (found.adapter, found.num_layers, found.num_heads, found.head_dim) == (family, layers, heads, head_dim)
    assert found.total_heads == layers * heads and found.o_proj_in_features == heads * head_dim
    assert found.attention_modules == [f"model.language_model.layers.{i}.self_attn" for i in range(layers)]
    assert {(v.width, v.height): (v.tokens, v.cells) for v in found.visual} == counts, [v.note for v in found.visual]
    assert {v.note for v in found.visual} == {STAND_IN_NOTE}
    assert sorted(f.name for f in path.iterdir()) == sorted(f.name.replace(".RECONSTRUCTED", "") for f in (
        REAL / folder).iterdir() if "first_release" not in f.name and "475-byte" not in f.name)  # untouched
    text = found.format()
    assert f"{layers} layers x {heads} heads = {layers * heads:,}" in text
    assert f"model.language_model.layers.{{0..{layers - 1}}}.self_attn" in text


@needs_real
def test_table_a7_head_counts_from_the_bare_real_folders():
    """784 = 28 x 28 for Qwen2.5-VL-7B and InternVL3-8B (paper Table A7), from the shared folders as they are;
    without a tokenizer there and no stand-in given, the count is refused in one line, not guessed."""
    for folder in ("qwen2_5_vl_7b", "internvl3_8b_hf"):
        found = inspect_checkpoint(str(REAL / folder), image_sizes=((1792, 1344),))
        assert found.total_heads == 784 and found.head_dim == 128
        (v,) = found.visual
        assert v.tokens is None and "has no tokenizer files" in v.note and "stand-in" not in v.note
        assert "visual tokens not counted" in found.format()


@pytest.mark.parametrize("family", sorted(TINY_BUILDERS))
def test_a_config_only_folder_counts_as_the_whole_one(tmp_path, family):
    """Every family with a tiny build: its save without the tokenizer files counts the visual tokens and cells the
    whole save counts, through the stand-in (and says so); with no stand-in it is not counted."""
    whole = save_tiny(*TINY_BUILDERS[family](), tmp_path / "whole")
    bare = tmp_path / "bare"
    shutil.copytree(whole, bare, ignore=shutil.ignore_patterns(*TOKENIZER_FILES, *TOKENIZER_DEFINITIONS))
    sizes = ((64, 48), (40, 72))
    expected = inspect_checkpoint(str(whole), image_sizes=sizes, stand_in=stand_in_tokenizer)
    assert all(v.tokens and not v.note for v in expected.visual), [v.note for v in expected.visual]
    found = inspect_checkpoint(str(bare), image_sizes=sizes, stand_in=stand_in_tokenizer)
    assert [(v.tokens, v.cells, v.meta) for v in found.visual] == [(v.tokens, v.cells, v.meta) for v in expected.visual]
    assert [v.note for v in found.visual] == [STAND_IN_NOTE] * 2
    assert f"{found.visual[0].tokens:,} visual tokens, {found.visual[0].cells:,} of them cells ({STAND_IN_NOTE})" \
        in found.format()
    assert [v.tokens for v in inspect_checkpoint(str(bare), image_sizes=sizes).visual] == [None, None]


SMALL_LM = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16)


@needs_real
@pytest.mark.parametrize("folder, family, sizes, tokens", [
    ("paligemma2_448", "paligemma", ((448, 448), (640, 480)), 1024),
    ("gemma3_4b_it", "gemma3", ((896, 896), (640, 480)), 256),
], ids=["paligemma2_448", "gemma3_4b_it"])
def test_real_processor_files_without_a_config_count_with_a_stand_in(tmp_path, folder, family, sizes, tokens):
    """The shared PaliGemma2-448 and Gemma 3 folders hold processor files only (no config.json, so the CLI refuses
    them in one line); beside a config of the family with its published vision shape (SigLIP, 14-px patches, 448
    and 896 px) and a small LM, they count one image as SOURCES.md says (448 px -> 1,024 tokens; Gemma 3's
    ``image_seq_length`` 256) at any size, with the family's stand-in tokenizer."""
    from transformers import Gemma3Config, PaliGemmaConfig

    with pytest.raises(FileNotFoundError, match="has no config.json"):
        inspect_checkpoint(str(REAL / folder))
    path = current_files(folder, tmp_path / folder)
    if family == "paligemma":
        config = PaliGemmaConfig(vision_config=dict(image_size=448, patch_size=14),
                                 text_config=dict(model_type="gemma2", **SMALL_LM))
    else:
        config = Gemma3Config(vision_config=dict(image_size=896, patch_size=14), text_config=SMALL_LM)
    config.save_pretrained(path)
    found = inspect_checkpoint(str(path), image_sizes=sizes, stand_in=stand_in_tokenizer)
    assert found.adapter == family
    assert [(v.tokens, v.cells, v.note) for v in found.visual] == [(tokens, tokens, STAND_IN_NOTE)] * len(sizes)


@needs_real
def test_a_processor_that_cannot_count_is_one_line_per_size(tmp_path):
    """A tokenizer but no image processor config: the structure is still read, each size says why in one line."""
    shutil.copy(REAL / "qwen2_5_vl_7b" / "config.json", tmp_path / "config.json")
    stand_in_tokenizer("qwen2_5_vl").save_pretrained(tmp_path)
    found = inspect_checkpoint(str(tmp_path), image_sizes=((448, 448), (64, 64)))
    assert found.total_heads == 784 and [v.tokens for v in found.visual] == [None, None]
    assert all(v.note.startswith(f"{tmp_path} has no processor config (processor_config.json or "
                                 "preprocessor_config.json)") and "\n" not in v.note for v in found.visual)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava"])
def test_a_folder_of_config_json_alone_says_in_one_line_what_file_it_needs(tmp_path, family):
    """The README promised a count for a config-only folder, which cannot count without the processor config
    (it sets how an image becomes tokens); the message was cut mid-word and named an internal temp folder
    (issue 46 item 11): one whole line naming the file, and the count comes once that file is there."""
    whole = save_tiny(*TINY_BUILDERS[family](), tmp_path / "whole")
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(whole / "config.json", bare / "config.json")
    found = inspect_checkpoint(str(bare), image_sizes=((64, 48),), stand_in=stand_in_tokenizer)
    (v,) = found.visual
    assert v.tokens is None and v.note == (
        f"{bare} has no processor config (processor_config.json or preprocessor_config.json), which sets how an "
        "image becomes visual tokens: download it too (all but the weights) or save it there with "
        "processor.save_pretrained(FOLDER)")
    assert "vrh-stand-in" not in found.format() and found.format().endswith("processor.save_pretrained(FOLDER)")
    shutil.copy(whole / "processor_config.json", bare / "processor_config.json")  # the configs, no tokenizer
    (v,) = inspect_checkpoint(str(bare), image_sizes=((64, 48),), stand_in=stand_in_tokenizer).visual
    assert v.tokens and v.note == STAND_IN_NOTE


def test_a_processor_error_through_the_stand_in_names_the_checkpoint_not_the_temp_folder(tmp_path, monkeypatch):
    from vrh.models.adapters import get_adapter

    whole = save_tiny(*TINY_BUILDERS["qwen2_5_vl"](), tmp_path / "whole")
    bare = tmp_path / "bare"
    shutil.copytree(whole, bare, ignore=shutil.ignore_patterns(*TOKENIZER_FILES, *TOKENIZER_DEFINITIONS))
    adapter = type(get_adapter("qwen2_5_vl"))

    def failing(self, path):
        raise OSError(f"Can't load image processor for '{path}'. " + "A long explanation follows. " * 20)

    monkeypatch.setattr(adapter, "processor_for", failing)
    (v,) = inspect_checkpoint(str(bare), image_sizes=((64, 48),), stand_in=stand_in_tokenizer).visual
    assert f"Can't load image processor for '{bare}'" in v.note and "vrh-stand-in" not in v.note
    assert v.note.endswith("A long explanation follows.); tried with a stand-in tokenizer, the checkpoint having no "
                           "tokenizer files")  # whole, not cut mid-word


def test_qwen3_vl_8b_shape_gives_1152_heads(tmp_path):
    """Qwen3-VL-8B's LM shape (36 layers x 32 heads of 128, 8 KV heads, hidden 4096: its published
    text_config; paper Table A7 gives 36 x 32 = 1,152) built on the meta device; no shared file has it."""
    from transformers import Qwen3VLConfig

    Qwen3VLConfig(text_config=dict(num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                   hidden_size=4096, intermediate_size=12288)).save_pretrained(tmp_path)
    found = inspect_checkpoint(str(tmp_path))
    assert (found.adapter, found.num_layers, found.num_heads, found.total_heads) == ("qwen3_vl", 36, 32, 1152)
    assert found.num_kv_heads == 8 and found.o_proj_in_features == 4096


def test_meta_inspection_counts_what_a_real_load_builds():
    """The organism (weights loaded for real) makes as many visual tokens and cells as its inspection says."""
    from PIL import Image

    from vrh.models.loading import load_model

    lm = load_model("organism")
    found = inspect_checkpoint("organism", image_sizes=((64, 64), (100, 60)))
    assert (found.num_layers, found.num_heads) == (lm.num_layers, lm.num_heads)
    assert found.parameters == sum(p.numel() for p in lm.model.parameters())
    for v in found.visual:
        batch = lm.adapter.build_batch(lm.processor, [Image.new("RGB", (v.width, v.height))],
                                       [lm.adapter.grounding_prompt("it")])
        assert (v.tokens, v.cells) == (len(batch.visual_positions[0]), int(batch.cell_tokens[0].sum()))


def test_hub_id_resolves_from_the_local_cache_only(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not in the local Hugging Face cache and inspect does not download"):
        inspect_checkpoint("some-org/not-cached-model")
    snapshot = tmp_path / "models--some-org--cached-model" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    from transformers import Qwen2_5_VLConfig

    Qwen2_5_VLConfig(text_config=dict(num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                      hidden_size=64, intermediate_size=128)).save_pretrained(snapshot)
    found = inspect_checkpoint("some-org/cached-model")
    assert found.path == str(snapshot) and (found.num_layers, found.num_heads, found.head_dim) == (3, 4, 16)


def test_refused_family_and_bad_input_are_one_line_errors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "internvl_chat"}))
    with pytest.raises(ValueError, match="remote-code checkpoint") as e:
        inspect_checkpoint(str(tmp_path))
    assert "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        inspect_checkpoint(str(tmp_path / ".."))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        inspect_checkpoint(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="is a file, not a checkpoint folder"):
        inspect_checkpoint(str(tmp_path / "config.json"))
    for bad in ("1792", "0x10", "axb", "12x"):
        with pytest.raises(ValueError, match="expected WIDTHxHEIGHT"):
            parse_image_size(bad)


def test_heads_that_do_not_split_o_proj_are_refused(tmp_path):
    """An adapter whose head count does not divide o_proj's input as [heads, head_dim] (a custom adapter's
    mistake) is refused before anything reports its grid."""
    from transformers import Qwen2_5_VLConfig

    Qwen2_5_VLConfig(text_config=dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      hidden_size=64, intermediate_size=128)).save_pretrained(tmp_path / "ckpt")
    (tmp_path / "wrong_heads.py").write_text(
        "from vrh.models.adapters.qwen_vl import Qwen2_5_VLAdapter\n\n"
        "class WrongHeads(Qwen2_5_VLAdapter):\n    def num_heads(self, model):\n        return 8\n")
    with pytest.raises(ValueError, match=r"o_proj input features \[64\] != 8 heads x 16 head dim"):
        inspect_checkpoint(str(tmp_path / "ckpt"), adapter=f"{tmp_path / 'wrong_heads.py'}:WrongHeads")
