"""Tiny random-init *real* VLM architectures with locally built processors, for tests and benchmarks.

Why: vrh must be exercised end to end (processor -> token map -> attention capture) without network
access or big checkpoints. Each builder returns ``(model, processor)`` for a genuine transformers class
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL, LLaVA) with a few layers, hidden size 64 and GQA (4 query / 2 KV heads),
and a processor assembled offline: a byte-level BPE tokenizer trained in memory on a fixed corpus
(deterministic), the family's special tokens and a small chat template, plus the PIL image processor
configured so images give only a handful of visual tokens. Builders are cached per process on their
arguments; treat the returned objects as read-only (call ``copy.deepcopy`` before mutating weights).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast


# ------------------------------------------------------------------------------------------------
# Tokenizer
# ------------------------------------------------------------------------------------------------

QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]
LLAVA_SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<image>"]

# Qwen-style chat template: image parts become <|vision_start|><|image_pad|><|vision_end|>, which the
# processor expands to one <|image_pad|> per merged visual token.
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# LLaVA-1.5 style: "USER: <image>\n{text} ASSISTANT:"; the processor expands <image>.
LLAVA_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}USER: {% else %}ASSISTANT: {% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>\n"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'user' %} {% else %}</s>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)

_CORPUS = [
    "Locate the {e} in the image and output its bbox coordinates in JSON format.",
    "Locate the {e} in the image, output its bbox coordinates using JSON format.",
    "Find the bounding box of the {e}. Output the box as [x1, y1, x2, y2].",
    "Where is the {e}? What color is the {e}? How many {e} are there? Answer briefly.",
    '```json\n[\n\t{{"bbox_2d": [12, 345, 678, 901], "label": "{e}"}}\n]\n```',
    "(123,456),(789,1000) [ 8 , 12 , 40 , 44 ] yes no left right top bottom user assistant system",
    "You are a helpful assistant. The image shows a {e} next to a table, a window and a tree.",
]
_EXPRESSIONS = ["red ball", "blue square", "small dog", "man in a hat", "green car", "white cup",
                "yellow circle", "black cat", "person on the left", "tall building"]


@functools.lru_cache(maxsize=None)
def _bpe_tokenizer_json(specials: tuple[str, ...], vocab_size: int) -> str:
    """Byte-level BPE (digits split one per token, like Qwen) trained in memory; returns its JSON."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [line.format(e=e) for line in _CORPUS for e in _EXPRESSIONS]
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok.to_str()


def build_tokenizer(specials: list[str], *, pad: str, eos: str, bos: str | None = None,
                    extra: dict[str, str] | None = None, chat_template: str | None = None,
                    vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A small offline tokenizer: specials first (ids 0..n-1), left padding, given chat template."""
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_bpe_tokenizer_json(tuple(specials), vocab_size)),
        pad_token=pad, eos_token=eos, bos_token=bos, padding_side="left",
        extra_special_tokens=extra or {}, model_max_length=4096)
    tok.add_special_tokens({"additional_special_tokens": [s for s in specials if s not in (pad, eos, bos)]})
    if chat_template is not None:
        tok.chat_template = chat_template
    return tok


def qwen_tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer(QWEN_SPECIAL_TOKENS, pad="<|endoftext|>", eos="<|im_end|>",
                           chat_template=QWEN_CHAT_TEMPLATE)


def llava_tokenizer() -> PreTrainedTokenizerFast:
    return build_tokenizer(LLAVA_SPECIAL_TOKENS, pad="<pad>", eos="</s>", bos="<s>",
                           chat_template=LLAVA_CHAT_TEMPLATE)


# ------------------------------------------------------------------------------------------------
# Models
# ------------------------------------------------------------------------------------------------

_TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=2048)


def finish_tiny_model(model: torch.nn.Module, tokenizer) -> torch.nn.Module:
    """Common tail: eval, float32, generation ids consistent with the tokenizer."""
    model = model.float().eval()
    gc = model.generation_config
    gc.pad_token_id = tokenizer.pad_token_id
    gc.eos_token_id = tokenizer.eos_token_id
    gc.bos_token_id = tokenizer.bos_token_id
    gc.do_sample = False
    return model


def _qwen_ids(tok) -> dict[str, int]:
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]}
    return ids


def _qwen_processor(proc_cls, tok, *, patch_size: int, min_pixels: int, max_pixels: int):
    from transformers import Qwen2VLImageProcessorPil

    from vrh.models.adapters.base import image_only

    ip = Qwen2VLImageProcessorPil(patch_size=patch_size, merge_size=2, temporal_patch_size=2,
                                  min_pixels=min_pixels, max_pixels=max_pixels)
    return image_only(proc_cls)(image_processor=ip, tokenizer=tok, chat_template=tok.chat_template)


def tiny_text_config(tok, overrides: dict[str, Any], **family) -> dict[str, Any]:
    """The tiny language model's config: the shared sizes, the tokenizer's ids, then ``family``'s keys
    (model type, rope, ...), then a test's ``overrides``."""
    cfg = dict(_TEXT, vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
               bos_token_id=tok.bos_token_id)
    cfg.update(family)
    cfg.update(overrides)
    return cfg


@functools.lru_cache(maxsize=None)
def _tiny_qwen(family: str, seed: int, overrides_json: str):
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor,
                              Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor, Qwen3VLConfig,
                              Qwen3VLForConditionalGeneration, Qwen3VLProcessor)

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    min_pixels, max_pixels = ov.pop("min_pixels", None), ov.pop("max_pixels", 112 * 112)
    tok = qwen_tokenizer()
    # mrope_section splits head_dim/2 = 8 rotary frequencies over (t, h, w).
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
    if family == "qwen2_vl":
        patch, cls, pcls, ccls = 14, Qwen2VLForConditionalGeneration, Qwen2VLProcessor, Qwen2VLConfig
        vision = dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14)
    elif family == "qwen2_5_vl":
        patch, cls, pcls, ccls = 14, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor, Qwen2_5_VLConfig
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      patch_size=14, window_size=56, fullatt_block_indexes=[1])
    else:
        patch, cls, pcls, ccls = 16, Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLConfig
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0])
        rope = dict(rope, mrope_interleaved=True)
    vision.update(vision_ov)
    text = tiny_text_config(tok, text_ov, rope_parameters=rope, **({"head_dim": 16} if family == "qwen3_vl" else {}))
    factor = patch * 2
    config = ccls(text_config=text, vision_config=vision, **_qwen_ids(tok), **ov)
    torch.manual_seed(seed)
    model = cls._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    processor = _qwen_processor(pcls, tok, patch_size=patch, min_pixels=min_pixels or 4 * factor * factor,
                                max_pixels=max_pixels)
    return finish_tiny_model(model, tok), processor


def tiny_qwen2_vl(seed: int = 0, **overrides):
    """Qwen2VLForConditionalGeneration: 2 LM layers, 4q/2kv heads, 1 vision block, 28-px cells."""
    return _tiny_qwen("qwen2_vl", seed, json.dumps(overrides, sort_keys=True))


def tiny_qwen2_5_vl(seed: int = 0, **overrides):
    """Qwen2_5_VLForConditionalGeneration: 2 LM layers, 4q/2kv heads, 2 vision blocks (window + full)."""
    return _tiny_qwen("qwen2_5_vl", seed, json.dumps(overrides, sort_keys=True))


def tiny_qwen3_vl(seed: int = 0, **overrides):
    """Qwen3VLForConditionalGeneration: 2 LM layers, 4q/2kv heads, 2 vision blocks + deepstack, 32-px cells."""
    return _tiny_qwen("qwen3_vl", seed, json.dumps(overrides, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _tiny_llava(seed: int, overrides_json: str):
    from transformers import (CLIPImageProcessorPil, LlavaConfig, LlavaForConditionalGeneration,
                              LlavaImageProcessorPil, LlavaProcessor)

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    image_size = ov.pop("image_size", 112)
    do_pad, resize = ov.pop("do_pad", False), ov.pop("resize", image_size)  # pad to square; shortest edge
    tok = llava_tokenizer()
    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=image_size, patch_size=16, projection_dim=32)
    vision.update(vision_ov)
    text = tiny_text_config(tok, text_ov, model_type="llama")
    n_tokens = (image_size // vision["patch_size"]) ** 2
    config = LlavaConfig(text_config=text, vision_config=vision, image_token_index=tok.convert_tokens_to_ids("<image>"),
                         image_seq_length=n_tokens, vision_feature_select_strategy="default",
                         vision_feature_layer=-2, **ov)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    ip_cls = LlavaImageProcessorPil if do_pad else CLIPImageProcessorPil
    ip = ip_cls(size={"shortest_edge": resize}, crop_size={"height": image_size, "width": image_size},
                **({"do_pad": True} if do_pad else {}))
    processor = LlavaProcessor(image_processor=ip, tokenizer=tok, patch_size=vision["patch_size"],
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               chat_template=tok.chat_template)
    return finish_tiny_model(model, tok), processor


def tiny_llava(seed: int = 0, **overrides):
    """LlavaForConditionalGeneration: tiny Llama LM + 2-layer CLIP tower (112 px, 16-px patches, CLS dropped).
    ``do_pad=True``: ``LlavaImageProcessorPil`` pads to a square first (LLaVA-1.5's pad); ``resize=N``: the
    shortest edge is resized to N before the 112-px centre crop (N < 112: the crop pads)."""
    return _tiny_llava(seed, json.dumps(overrides, sort_keys=True))


def save_tiny(model: torch.nn.Module, processor: Any, directory: str | Path) -> Path:
    """Write model + processor so ``from_pretrained(directory)`` (and ``adapter.load``) can read them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    processor.save_pretrained(directory)
    return directory
