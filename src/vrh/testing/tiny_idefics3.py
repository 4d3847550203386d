"""Tiny random-init Idefics3 (``Idefics3ForConditionalGeneration``; SmolVLM v1 checkpoints are this class too)
with a locally built processor: the real ``Idefics3Processor`` over the PIL ``Idefics3ImageProcessorPil`` (no
torchvision) and an in-memory BPE tokenizer carrying Idefics3's special tokens (``<fake_token_around_image>``,
``<image>``, ``<global-img>``, ``<row_i_col_j>``, ``<end_of_utterance>``) and a chat template shaped like
``HuggingFaceM4/Idefics3-8B-Llama3``'s (``User:<image>...<end_of_utterance>\\nAssistant:``).

Shapes: 2 Llama LM layers with 4q/2kv heads; a 1-layer SigLIP-style tower on 48-px frames of 8-px patches, so
the scale-2 pixel shuffle gives 3 x 3 = 9 tokens of 16 frame pixels per frame (Idefics3: 364-px frames of
14-px patches, 13 x 13 = 169 tokens; SmolVLM: 512 px, 8 x 8 = 64). The image is first resized to a longest
edge of 2 frames (Idefics3: 4 x 364), so images are cut into up to 2 x 2 tiles plus the global frame.
"""

from __future__ import annotations

import functools
import json

import torch

ROW_COL_TAGS = [f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)]  # what the processor may emit
IDEFICS3_SPECIAL_TOKENS = ["<|begin_of_text|>", "<end_of_utterance>", "<pad>", "<fake_token_around_image>",
                           "<image>", "<global-img>", *ROW_COL_TAGS]
# Idefics3-8B-Llama3's template shape: "User:" directly followed by the image, the answer after "Assistant:"
IDEFICS3_CHAT_TEMPLATE = (
    "<|begin_of_text|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
FRAME, PATCH, SCALE = 48, 8, 2  # frame side, ViT patch, pixel-shuffle factor


def idefics3_tokenizer():
    from vrh.testing.tiny_models import build_tokenizer

    return build_tokenizer(IDEFICS3_SPECIAL_TOKENS, pad="<pad>", eos="<end_of_utterance>", bos="<|begin_of_text|>",
                           chat_template=IDEFICS3_CHAT_TEMPLATE)


def idefics3_processor(tokenizer, *, frame: int = FRAME, longest_edge: int | None = None, tokens_per_frame: int = 9,
                       do_image_splitting: bool = True):
    """The real processor pair. ``longest_edge`` (the first resize) defaults to two frames."""
    from transformers import Idefics3ImageProcessorPil, Idefics3Processor

    ip = Idefics3ImageProcessorPil(size={"longest_edge": longest_edge or 2 * frame},
                                   max_image_size={"longest_edge": frame}, do_image_splitting=do_image_splitting)
    return Idefics3Processor(image_processor=ip, tokenizer=tokenizer, image_seq_len=tokens_per_frame,
                             chat_template=tokenizer.chat_template)


@functools.lru_cache(maxsize=None)
def _tiny_idefics3(seed: int, overrides_json: str):
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    from vrh.testing.tiny_models import finish_tiny_model, tiny_text_config

    ov = json.loads(overrides_json)
    text_ov, vision_ov = ov.pop("text_config", {}), ov.pop("vision_config", {})
    longest_edge = ov.pop("longest_edge", None)
    tok = idefics3_tokenizer()
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  image_size=FRAME, patch_size=PATCH)
    vision.update(vision_ov)
    text = tiny_text_config(tok, text_ov, model_type="llama")
    scale = ov.pop("scale_factor", SCALE)
    tokens_per_frame = (vision["image_size"] // vision["patch_size"] // scale) ** 2
    config = Idefics3Config(text_config=text, vision_config=vision, scale_factor=scale,
                            image_token_id=tok.convert_tokens_to_ids("<image>"), pad_token_id=tok.pad_token_id, **ov)
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    processor = idefics3_processor(tok, frame=vision["image_size"], longest_edge=longest_edge,
                                   tokens_per_frame=tokens_per_frame)
    return finish_tiny_model(model, tok), processor


def tiny_idefics3(seed: int = 0, **overrides):
    """Idefics3ForConditionalGeneration: 2 Llama LM layers, 4q/2kv heads, 1 ViT layer, 48-px frames of 3x3 tokens."""
    return _tiny_idefics3(seed, json.dumps(overrides, sort_keys=True))

