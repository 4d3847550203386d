"""Magma specifics: strict loading of a checkpoint folder written under the published key names and config schema
(github.com/microsoft/Magma ``magma/``: ``vision_tower.clip_vision_model.trunk.*`` from open_clip/timm,
``multi_modal_projector.*``, ``language_model.*``), refusals of a missing or extra key, the ConvNeXt trunk (eps 1e-5
everywhere; the same numbers as transformers' independent ConvNeXt given the same weights and eps), both
``img_anyres_strategy`` values, and inspect on the real Magma-8B config (``../shared/real/checkpoints/magma_8b``;
skipped where absent)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

import vrh
from vrh.testing.tiny_magma import tiny_magma

REAL = Path(__file__).resolve().parents[3] / ".." / "shared" / "real" / "checkpoints" / "magma_8b"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason="the real checkpoint files (../shared/real) are absent")

DEPTHS, WIDTHS, HIDDEN = (1, 2, 1, 1), (8, 16, 16, 24), 32  # a shrunk ConvNeXt-XXLarge and Llama
TOWER = "vision_tower.clip_vision_model."


def published_tensors(text: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every tensor the published checkpoint holds, by name and shape, written from the architecture facts rather
    than from vrh's module: timm's ConvNeXt trunk names inside open_clip's ``.visual`` (plus its pooled head, which
    Magma keeps and never runs), the projector with ``row_seperator``, and a native Llama under ``language_model``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    g = torch.Generator().manual_seed(seed)
    shapes: dict[str, tuple[int, ...]] = {}
    trunk = TOWER + "trunk."
    shapes |= {trunk + "stem.0.weight": (WIDTHS[0], 3, 4, 4), trunk + "stem.0.bias": (WIDTHS[0],),
               trunk + "stem.1.weight": (WIDTHS[0],), trunk + "stem.1.bias": (WIDTHS[0],)}
    for s, (depth, c) in enumerate(zip(DEPTHS, WIDTHS)):
        stage = f"{trunk}stages.{s}."
        if s:
            shapes |= {stage + "downsample.0.weight": (WIDTHS[s - 1],), stage + "downsample.0.bias": (WIDTHS[s - 1],),
                       stage + "downsample.1.weight": (c, WIDTHS[s - 1], 2, 2), stage + "downsample.1.bias": (c,)}
        for b in range(depth):
            blk = f"{stage}blocks.{b}."
            shapes |= {blk + "conv_dw.weight": (c, 1, 7, 7), blk + "conv_dw.bias": (c,), blk + "norm.weight": (c,),
                       blk + "norm.bias": (c,), blk + "mlp.fc1.weight": (4 * c, c), blk + "mlp.fc1.bias": (4 * c,),
                       blk + "mlp.fc2.weight": (c, 4 * c), blk + "mlp.fc2.bias": (c,), blk + "gamma": (c,)}
    shapes |= {trunk + "head.norm.weight": (WIDTHS[-1],), trunk + "head.norm.bias": (WIDTHS[-1],),
               TOWER + "head.proj.weight": (1024, WIDTHS[-1])}  # open_clip convnext_xxlarge: embed_dim 1024, no bias
    shapes |= {"multi_modal_projector.proj.0.weight": (HIDDEN, WIDTHS[-1]), "multi_modal_projector.proj.0.bias": (HIDDEN,),
               "multi_modal_projector.proj.2.weight": (HIDDEN, HIDDEN), "multi_modal_projector.proj.2.bias": (HIDDEN,),
               "multi_modal_projector.row_seperator": (1, 1, HIDDEN)}
    with torch.device("meta"):
        lm = LlamaForCausalLM(LlamaConfig(**text))
    shapes |= {f"language_model.{k}": tuple(v.shape) for k, v in lm.state_dict().items()}
    return {k: torch.randn(s, generator=g) * 0.1 for k, s in shapes.items()}


def write_checkpoint(folder: Path, tensors: dict[str, torch.Tensor]) -> Path:
    """A Magma-8B-shaped folder: config.json in the published schema (text fields at the top level too, auto_map,
    text_config, vision_config), two safetensors shards with their index, the preprocessor config, a tokenizer."""
    _, processor = tiny_magma()
    tok = processor.tokenizer
    text = dict(vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5,
                rope_theta=500000.0, rope_scaling=None, tie_word_embeddings=False, hidden_act="silu")
    config = {"_name_or_path": "microsoft/Magma-8B", "architectures": ["MagmaForCausalLM"],
              "auto_map": {"AutoConfig": "configuration_magma.MagmaConfig",
                           "AutoModelForCausalLM": "modeling_magma.MagmaForCausalLM"},
              **text, "image_token_index": tok.convert_tokens_to_ids("<image>"), "img_size": 64, "model_type": "magma",
              "text_config": {**text, "model_type": "llama"},
              "vision_config": {"vision_backbone": "convnextxxlarge", "convnext_depths": list(DEPTHS),
                                "convnext_widths": list(WIDTHS), "mm_hidden_size": WIDTHS[-1],
                                "mm_projector_type": "mlp2x_gelu", "mm_use_im_start_end": False,
                                "img_anyres_strategy": "crop", "vision_feature_layer": "clip_vis_dense"}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, keys in shards.items():
        save_file({k: tensors[k].contiguous() for k in keys}, str(folder / file))
    weight_map = {k: file for file, keys in shards.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": tok.bos_token_id,
                                                                "eos_token_id": tok.eos_token_id,
                                                                "pad_token_id": tok.pad_token_id}))
    processor.save_pretrained(folder)
    return folder


def _text() -> dict:
    tok = tiny_magma()[1].tokenizer
    return dict(vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)


def coord_image(width: int, height: int) -> Image.Image:
    y, x = np.mgrid[0:height, 0:width]
    return Image.fromarray(np.stack([x, y, np.full_like(x, 255)], axis=-1).astype(np.uint8))


def test_published_checkpoint_loads_strictly_through_load_model(tmp_path):
    """Every published tensor lands where its name says (the open_clip pooled head dropped by name), the sharded
    folder loads through the user's path with no remote code, and the loaded model runs an image prompt."""
    tensors = published_tensors(_text())
    folder = write_checkpoint(tmp_path / "magma", tensors)
    lm = vrh.load_model(str(folder))
    state = lm.model.state_dict()
    head = [k for k in tensors if k.startswith((TOWER + "trunk.head.", TOWER + "head."))]
    assert len(head) == 3 and not any(k in state for k in head)
    assert set(tensors) - set(head) == set(state)
    assert all(torch.equal(state[k], tensors[k]) for k in state)
    assert lm.adapter.name == "magma" and lm.num_layers == 2 and lm.num_heads == 4
    assert lm.model.generation_config.eos_token_id == lm.processor.tokenizer.eos_token_id
    batch = lm.adapter.build_batch(lm.processor, [coord_image(150, 100)], [lm.adapter.grounding_prompt("red ball")])
    with torch.no_grad():
        logits = lm.model(**batch.inputs).logits
    assert logits.shape == (1, batch.seq_len, len(lm.processor.tokenizer)) and torch.isfinite(logits).all()


@pytest.mark.parametrize("change, message", [
    ("drop", "1 missing: language_model.model.layers.1.mlp.up_proj.weight"),
    ("extra", "1 unexpected: vision_tower.clip_vision_model.trunk.stages.3.blocks.1.gamma"),
    ("shape", "shape mismatch: multi_modal_projector.row_seperator"),
])
def test_a_missing_extra_or_misshapen_key_is_refused(tmp_path, change, message):
    tensors = published_tensors(_text())
    if change == "drop":
        del tensors["language_model.model.layers.1.mlp.up_proj.weight"]
    elif change == "extra":
        tensors[TOWER + "trunk.stages.3.blocks.1.gamma"] = torch.ones(WIDTHS[-1])
    else:
        tensors["multi_modal_projector.row_seperator"] = torch.ones(1, HIDDEN)
    folder = write_checkpoint(tmp_path / "magma", tensors)
    with pytest.raises(ValueError, match=re.escape(message)):
        vrh.load_model(str(folder))


def test_image_token_id_must_match_the_config(tmp_path):
    folder = write_checkpoint(tmp_path / "magma", published_tensors(_text()))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "image_token_index": 7}))
    with pytest.raises(ValueError, match="image_token_index 7"):
        vrh.load_model(str(folder))


def test_global_strategy_encodes_the_stitched_image_with_the_same_layout():
    """``img_anyres_strategy: global`` encodes the crops stitched back into one image, once: the same token count
    and row separators as "crop", features of the whole canvas (a ConvNeXt sees across crop borders)."""
    from vrh.models.adapters.magma.modeling import stitch

    model, processor = tiny_magma(vision_config={"img_anyres_strategy": "global"})
    crop_model, _ = tiny_magma()
    enc = processor([coord_image(150, 100)], ["<image>"])
    rows, cols = enc["image_sizes"][0].tolist()
    assert (rows, cols) == (2, 2)
    with torch.no_grad():
        glob = model.image_features(enc["pixel_values"], enc["image_sizes"])
        crop = crop_model.image_features(enc["pixel_values"], enc["image_sizes"])
        whole = enc["pixel_values"][0, :4].view(2, 2, 3, 64, 64).permute(2, 0, 3, 1, 4).reshape(1, 3, 128, 128)
        fmap = model.vision_tower(whole)[0].permute(1, 2, 0)  # (4, 4, D): the canvas' own feature grid
        want = model.multi_modal_projector(fmap)  # (4, 4, hidden)
    sep = model.multi_modal_projector.row_seperator.view(-1)
    assert glob.shape == crop.shape == (processor.num_image_tokens(rows, cols), model.config.text_config.hidden_size)
    got = glob.view(4, 5, -1)  # (R, C + 1, hidden)
    assert torch.allclose(got[:, :4], want, atol=1e-5) and torch.equal(got[:, 4], sep.expand(4, -1))
    assert (glob - crop).abs().max() > 100 * (got[:, :4] - want).abs().max() + 1e-6  # crop borders matter
    assert torch.equal(stitch(torch.arange(4.0).view(4, 1, 1, 1), 2, 2, None).flatten(), torch.tensor([0., 1, 2, 3]))


@needs_real
def test_inspect_on_the_real_config(tmp_path):
    """The config excerpt's fields (config.json.EXCERPT.txt: part A at the top level, part B's Llama fields as the
    text config, its mm_* fields as the vision config) and the real preprocessor_config.json: 32 layers x 32
    heads of dim 128 (8 KV heads), and the visual tokens of the vLLM port's count, rows * cols * 256 + rows * 16,
    for images whose crop grid is plain (512 px crops, at most 4)."""
    from vrh.models.inspect import inspect_checkpoint
    from vrh.testing.builders import stand_in_tokenizer

    excerpt = (REAL / "config.json.EXCERPT.txt").read_text(encoding="utf-8")
    pairs = dict(re.findall(r'^\s*(?:\d+\+?\s+)?"(\w+)": ([^,\n]+),?\s*(?:\(.*\))?$', excerpt, flags=re.M))
    value = lambda k: json.loads(pairs[k])  # noqa: E731
    text = {k: value(k) for k in ("hidden_size", "intermediate_size", "max_position_embeddings", "num_attention_heads",
                                  "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "rope_theta",
                                  "hidden_act", "attention_bias", "tie_word_embeddings")}
    vision = {k: value(k) for k in ("mm_hidden_size", "mm_projector_type", "mm_use_im_start_end")}
    config = {"model_type": "magma", "image_token_index": value("image_token_index"), **text,
              "text_config": {**text, "model_type": "llama"}, "vision_config": {**vision, "img_size": value("img_size")}}
    folder = tmp_path / "magma_8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(REAL / "preprocessor_config.json", folder / "preprocessor_config.json")
    sizes = {(512, 512): (1, 1), (1024, 512): (1, 2), (512, 1024): (2, 1), (1024, 1024): (2, 2)}  # (W, H): (rows, cols)
    found = inspect_checkpoint(str(folder), image_sizes=tuple(sizes), stand_in=stand_in_tokenizer)
    assert (found.num_layers, found.num_heads, found.num_kv_heads, found.head_dim) == (32, 32, 8, 128)
    assert found.attention_modules[0] == "language_model.model.layers.0.self_attn"
    for v, (rows, cols) in zip(found.visual, sizes.values(), strict=True):
        assert (v.tokens, v.cells) == (rows * cols * 256 + rows * 16, rows * cols * 256), (v.width, v.height, v.note)
        assert v.meta["token_grid"] == [rows * 16, cols * 16 + 1]


@pytest.mark.parametrize("flag, prefix", [(None, "<image_start><image><image_end>\n"), (False, "<image>\n")])
def test_image_tags_follow_the_configs_mm_use_image_start_end(flag, prefix):
    """The model card's ``<image_start><image><image_end>`` unless config.json sets ``mm_use_image_start_end``
    false (Magma's lmms-eval wrapper then keeps the bare ``<image>``)."""
    from vrh.models.adapters import get_adapter

    model, processor = tiny_magma(**({} if flag is None else {"mm_use_image_start_end": flag}))
    adapter = get_adapter("magma")
    adapter.on_load(model, processor)
    chat = adapter.chat_text(processor, "Where is it?")
    assert f"user<|end_header_id|>\n\n{prefix}Where is it?<|eot_id|>" in chat
    assert chat.count("<image>") == 1 and chat.startswith("<|begin_of_text|><|start_header_id|>system")


def test_the_authors_two_bos_by_default_and_one_bos_as_a_named_variant():
    """With a tokenizer that adds its own BOS (Llama 3's does), the authors' path (the model card, the lmms-eval
    wrapper) gives two: vrh's default for Magma; ``native_one_bos`` gives one (issue 45 item 18). Both say so in
    the record; the tiny build's tokenizer adds none, so there both give the template's one."""
    import copy

    from tokenizers.processors import TemplateProcessing

    from vrh.models import answer_formats as af
    from vrh.models.adapters import get_adapter

    _, tiny = tiny_magma()
    adds = copy.deepcopy(tiny)
    bos = adds.tokenizer.bos_token_id
    adds.tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    magma = get_adapter("magma")
    image = Image.new("RGB", (100, 80))
    leading = {}
    for processor, which in ((adds, "adds"), (tiny, "tiny")):
        for variant in ("native", "native_one_bos"):
            adapter = af.apply(magma, af.resolve(variant, magma))
            ids = adapter.build_batch(processor, [image], [adapter.grounding_prompt("a cat")]).inputs["input_ids"][0]
            leading[which, variant] = int((ids == bos).sum()) if ids[0] == bos else 0
            assert af.record(adapter).get("bos") == ("template" if variant == "native" else None)
    assert leading == {("adds", "native"): 2, ("adds", "native_one_bos"): 1, ("tiny", "native"): 1,
                       ("tiny", "native_one_bos"): 1}
