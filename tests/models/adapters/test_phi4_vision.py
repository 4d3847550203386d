"""Phi-4-Reasoning-Vision (``phi4-siglip``): strict loading from a folder written under the published key names,
the tower's weights from that folder (never a hub id), the remote processor's text tokens and feature splice
reproduced, and ``vrh models --inspect`` on the released config.

The reference checkpoint here is assembled independently of :mod:`vrh.models.adapters.phi4_vision.modeling`: native transformers
modules named as the remote code names them (``Phi4ForCausalLMV(Phi3ForCausalLM)``: plain Phi-3 keys;
``model.vision_tower.vision_tower`` = a transformers-4.x ``Siglip2VisionModel``, whose vision transformer sits under
``vision_model``; ``model.mm_projector`` = Sequential(Linear, GELU, Linear)), and the reference forward splices the
features the way the remote ``prepare_inputs_labels_for_multimodal`` does.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import vrh
from vrh.models.adapters import get_adapter
from vrh.models.adapters.phi4_vision.processing import Phi4VisionImageProcessor
from vrh.testing.tiny_phi4_vision import phi4_vision_tokenizer, tiny_phi4_vision, tiny_phi4_vision_config

from .pixels import coord_image

REAL = Path(__file__).resolve().parents[3].parent / "shared" / "real" / "checkpoints" / "phi4_reasoning_vision"
IMAGE_TOKEN_INDEX = -200  # the remote code's placeholder id
TOWER = "model.vision_tower.vision_tower.vision_model."
# keys NVIDIA TensorRT-LLM's phi4_visionr test asserts in the released model.safetensors.index.json
PUBLISHED = ["model.embed_tokens.weight", "model.layers.0.self_attn.qkv_proj.weight", "model.norm.weight",
             TOWER + "embeddings.patch_embedding.weight", TOWER + "encoder.layers.0.self_attn.q_proj.weight",
             TOWER + "post_layernorm.weight", "model.mm_projector.0.weight", "lm_head.weight"]


def reference_parts(config: dict, seed: int = 1):
    """Native modules under the remote code's structure: (Phi-3 causal LM, SigLIP2 vision model, projector)."""
    from transformers import Phi3Config, Phi3ForCausalLM, Siglip2VisionConfig, Siglip2VisionModel

    torch.manual_seed(seed)
    text = {k: v for k, v in config.items() if k not in ("vision_config", "model_type", "architectures", "auto_map")}
    lm = Phi3ForCausalLM(Phi3Config(**text)).eval()
    tower = Siglip2VisionModel(Siglip2VisionConfig(**config["vision_config"], patch_size=16)).eval()
    hidden, width = config["hidden_size"], config["mm_hidden_size"]
    projector = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden))
    return lm, tower, projector


def published_state(lm, tower, projector) -> dict[str, torch.Tensor]:
    """The tensors under the names the released checkpoint uses."""
    state = dict(lm.state_dict())
    state.update({TOWER + k: v for k, v in tower.state_dict().items()})
    state.update({f"model.mm_projector.{k}": v for k, v in projector.state_dict().items()})
    return {k: v.contiguous() for k, v in state.items()}


def write_checkpoint(folder: Path, *, drop: str | None = None, extra: str | None = None) -> tuple[Path, tuple]:
    """A checkpoint folder as a user has it: the released config schema, tokenizer files (no ``<image>`` token, as
    the release has none), ``model.safetensors`` under the published names. Returns (folder, reference parts)."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = phi4_vision_tokenizer()
    tok.save_pretrained(folder)
    config = tiny_phi4_vision_config(len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                     pad_token_id=tok.pad_token_id)
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    parts = reference_parts(config)
    state = published_state(*parts)
    if drop:
        del state[drop]
    if extra:
        state[extra] = torch.zeros(3)
    save_file(state, str(folder / "model.safetensors"))
    return folder, parts


def remote_input_ids(text: str, tok) -> list[int]:
    """The remote ``tokenizer_image_token`` (processing_phi4_visionr.py), verbatim in logic."""
    chunks = [tok(chunk).input_ids for chunk in text.split("<image>")]
    ids, offset = [], 0
    if chunks and chunks[0] and chunks[0][0] == tok.bos_token_id:
        offset = 1
        ids.append(chunks[0][0])
    spliced = [e for sub in zip(chunks, [[IMAGE_TOKEN_INDEX] * (offset + 1)] * len(chunks)) for e in sub][:-1]
    for x in spliced:
        ids.extend(x[offset:])
    return ids


def test_loads_the_published_names_strictly_and_matches_the_remote_forward(tmp_path, monkeypatch):
    """vrh.load_model on a user's folder: every published tensor lands where the remote code puts it, offline
    (the tower is the folder's, not google/siglip2's), and the logits equal the remote forward's: its text tokens,
    the tower's hidden_states[-2] without padding rows through the projector, spliced at the placeholder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("vrh asked whether to run remote code"))
    folder, (lm, tower, projector) = write_checkpoint(tmp_path / "ckpt")
    sentinel = tmp_path / "remote_code_ran"
    for module in ("modeling_phi4_visionr.py", "processing_phi4_visionr.py"):  # what config.json's auto_map names
        (folder / module).write_text(f"open({str(sentinel)!r}, 'w').write('ran')\n")
    assert set(PUBLISHED) <= set(load_file(str(folder / "model.safetensors")))
    loaded = vrh.load_model(str(folder))
    model, processor, adapter = loaded.model, loaded.processor, loaded.adapter
    assert adapter.name == "phi4_reasoning_vision" and loaded.num_layers == 2 and loaded.num_heads == 4
    theirs = model.state_dict()
    for key, value in published_state(lm, tower, projector).items():
        assert torch.equal(theirs[key], value), key

    image = coord_image(70, 90)
    prompt = adapter.grounding_prompt("red ball")
    batch = adapter.build_batch(processor, [image], [prompt])
    with torch.no_grad():
        got = model(**batch.inputs).logits[0]  # [S, V]
        # the remote path: text ids with one -200, embeddings of the text pieces around the image's features
        chat = processor.chat_text(prompt)
        ids = remote_input_ids(chat, processor.tokenizer)
        assert ids.count(IMAGE_TOKEN_INDEX) == 1
        pix = Phi4VisionImageProcessor.from_config(json.loads((folder / "config.json").read_text()))([image])
        hidden = tower(**pix, output_hidden_states=True).hidden_states[-2]  # [1, N, D]
        feats = projector(hidden[pix["pixel_attention_mask"].bool()])  # [n, hidden]
        cut = ids.index(IMAGE_TOKEN_INDEX)
        embed = lm.model.embed_tokens
        embeds = torch.cat([embed(torch.tensor(ids[:cut])), feats, embed(torch.tensor(ids[cut + 1:]))])[None]
        want = lm(inputs_embeds=embeds).logits[0]
    # the same sequence: vrh's ids are the remote ids with the -200 expanded to one placeholder per feature
    vis = batch.visual_positions[0]
    mine = batch.inputs["input_ids"][0].tolist()
    assert len(vis) == len(feats) and mine[:cut] + mine[cut + len(vis):] == ids[:cut] + ids[cut + 1:]
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    assert not sentinel.exists()


@pytest.mark.parametrize("adds_bos", [False, True])
def test_text_tokens_are_the_remote_processors(adds_bos):
    """The ids around the image are the remote ``tokenizer_image_token``'s whether or not the tokenizer adds a BOS
    (the released tokenizer is not at hand): pieces tokenized alone, one leading BOS kept, the placeholder run in
    place of its -200; and each text token's offsets point at its own characters."""
    from tokenizers import processors

    from vrh.models.adapters.phi4_vision.processing import Phi4VisionProcessor

    tok = phi4_vision_tokenizer()
    if adds_bos:
        tok._tokenizer.post_processor = processors.TemplateProcessing(
            single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", tok.bos_token_id)])
    processor = Phi4VisionProcessor(Phi4VisionImageProcessor(16, 8, 32), tok)
    text = processor.chat_text("Where is the red ball?")
    want = remote_input_ids(text, tok)
    assert (want[0] == tok.bos_token_id) == adds_bos and want.count(tok.bos_token_id) == int(adds_bos)
    enc = processor([text], [coord_image(70, 90)])
    ids, offsets = enc["input_ids"][0].tolist(), enc["offset_mapping"][0].tolist()
    n = ids.count(processor.image_token_id)
    cut = want.index(IMAGE_TOKEN_INDEX)
    assert n == 20 and ids[:cut] + ids[cut + n:] == want[:cut] + want[cut + 1:]
    for i, ((a, b), t) in enumerate(zip(offsets, ids)):
        if i >= cut + n and b > a:  # a text token after the image: its characters decode to it
            assert text[a:b] == tok.decode([t]), (i, text[a:b], tok.decode([t]))


def test_decoded_answers_keep_the_reasoning_tags_and_drop_the_markers():
    """``<think>`` as a special token (as in Phi-4-reasoning's tokenizer) survives decoding, so the box the model
    only considered is not read as its answer; NOTHINK's ``<|dummy_84|>`` and the end of turn are dropped."""
    _, processor = tiny_phi4_vision()
    adapter = get_adapter("phi4-siglip")
    tok = processor.tokenizer
    assert tok.convert_tokens_to_ids("<think>") in tok.all_special_ids
    for text, want in [("<think>maybe [1, 2, 3, 4]</think>[100, 200, 300, 400]<|im_end|>", (15.0, 20.0, 45.0, 40.0)),
                       ("<|dummy_84|>[100, 200, 300, 400]<|im_end|>", (15.0, 20.0, 45.0, 40.0))]:
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        answer = adapter.decode(processor, ids)[0]
        assert "<|im_end|>" not in answer and "<|dummy_84|>" not in answer
        assert adapter.parse_box(answer, {}, (150, 100)) == want, answer


@pytest.mark.parametrize("change", ["drop", "extra"])
def test_a_missing_or_extra_key_is_refused_by_name(tmp_path, change):
    key = TOWER + "head.probe" if change == "drop" else "model.vision_tower.vision_tower.image_newline"
    folder, _ = write_checkpoint(tmp_path / "ckpt", **{change: key})
    with pytest.raises(ValueError) as e:
        vrh.load_model(str(folder))
    msg = str(e.value)
    assert "\n" not in msg and ("1 missing" if change == "drop" else "1 unexpected") in msg and key in msg


def test_the_tower_loads_from_the_checkpoint_keys_not_the_hub_weights(tmp_path):
    """Two folders that differ only in their tower tensors give different tower weights and features: nothing is
    taken from ``mm_vision_tower``'s hub id (the remote code's trap when loaded by id)."""
    a, _ = write_checkpoint(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    state = load_file(str(b / "model.safetensors"))
    key = TOWER + "embeddings.patch_embedding.weight"
    state[key] = state[key] + 0.5
    save_file(state, str(b / "model.safetensors"))
    ma, mb = vrh.load_model(str(a)), vrh.load_model(str(b))
    assert torch.equal(mb.model.state_dict()[key], state[key])
    batch = ma.adapter.build_batch(ma.processor, [coord_image(70, 90)], ["x"])
    args = [batch.inputs[k] for k in ("pixel_values", "pixel_attention_mask", "spatial_shapes")]
    with torch.no_grad():
        assert not torch.allclose(ma.model.model.image_features(*args), mb.model.model.image_features(*args))


def test_config_it_cannot_build_is_refused():
    adapter = get_adapter("phi4-siglip")
    config = tiny_phi4_vision_config(100)
    with pytest.raises(ValueError, match="mm_projector_type 'resampler'"):
        adapter.build_model({**config, "mm_projector_type": "resampler"})
    with pytest.raises(ValueError, match="NaFlex tower"):
        adapter.build_model({**config, "mm_vision_tower": "google/siglip-so400m-patch14-384"})


# --- the released files (skipped where ../shared is absent) ----------------------------------------------------

needs_real = pytest.mark.skipif(not (REAL / "config.json").is_file(), reason="no ../shared/real checkpoint files")


@needs_real
def test_inspect_counts_heads_and_visual_tokens_of_the_released_config(tmp_path):
    """``vrh models --inspect`` on the released config (no weights, no tokenizer: the tiny build's stands in):
    40 layers x 40 heads = 1,600 (10 KV heads, head dim 128), and one token per 16-px patch of the resized image."""
    from vrh.models.inspect import inspect_checkpoint
    from vrh.testing.builders import stand_in_tokenizer

    for name in ("config.json", "preprocessor_config.json", "chat_template.jinja"):
        shutil.copy(REAL / name, tmp_path / name)
    found = inspect_checkpoint(str(tmp_path), image_sizes=((150, 100), (640, 480), (1792, 1344)),
                               stand_in=stand_in_tokenizer)
    assert (found.num_layers, found.num_heads, found.total_heads) == (40, 40, 1600)
    assert (found.num_kv_heads, found.head_dim, found.o_proj_in_features) == (10, 128, 5120)
    assert found.attention_modules[0] == "model.layers.0.self_attn"
    assert [(v.tokens, v.cells) for v in found.visual] == [(247, 247), (1200, 1200), (3588, 3588)]
    assert [v.meta["token_grid"] for v in found.visual] == [[13, 19], [30, 40], [52, 69]]


@needs_real
def test_the_released_chat_template_and_image_settings():
    """The released template renders the remote processor's text; the released preprocessor_config.json agrees
    with the settings vrh takes from config.json (as the remote processor does)."""
    from vrh.models.adapters.phi4_vision.processing import Phi4VisionProcessor

    tok = phi4_vision_tokenizer()
    tok.chat_template = (REAL / "chat_template.jinja").read_text(encoding="utf-8")
    config = json.loads((REAL / "config.json").read_text())
    processor = Phi4VisionProcessor(Phi4VisionImageProcessor.from_config(config), tok)
    chat = processor.chat_text("Where is it?")
    assert chat.startswith("<|im_start|>system<|im_sep|>You are Phi, a multimodal model")
    # the template's own line breaks survive (a newline after each turn, and after the generation prompt, which a
    # teacher-forced answer therefore follows), as they do for the remote processor, which renders the same file
    assert chat.endswith("<|im_end|>\n<|im_start|>user<|im_sep|><image>\nWhere is it?<|im_end|>\n"
                         "<|im_start|>assistant<|im_sep|>\n")
    pre = json.loads((REAL / "preprocessor_config.json").read_text())
    ip = processor.image_processor
    assert (ip.patch_size, ip.min_num_patches, ip.max_num_patches) == (pre["patch_size"], pre["min_num_patches"],
                                                                      pre["max_num_patches"])
    assert (list(ip.image_mean), list(ip.image_std), ip.resample) == (pre["image_mean"], pre["image_std"],
                                                                       pre["resample"])
    assert ip.rescale_factor == pytest.approx(pre["rescale_factor"])
