"""GLM-4.1V-Thinking, GLM-4.5V and GLM-4.6V (``Glm4vForConditionalGeneration``, ``Glm46VForConditionalGeneration``).

The vision side is Qwen2-VL's: the image processor resizes to a multiple of ``patch_size * merge_size``
(14 x 2 = 28 px), emits patches grouped by ``merge x merge`` window, and the tower merges each window into
one LM token, row-major over the merged grid of ``image_grid_thw``. So the token -> rectangle map is
:meth:`QwenVLAdapter.visual_map` unchanged (checked by the pixel-content test). The LM is GLM-4: q/k/v with
bias, GQA, half-rotary 3-axis RoPE; ``o_proj`` has no bias, so masking at its input is exact.

Grounding, from the model card / README of ``zai-org/GLM-V`` ("Use Cases / Grounding"):

* prompt ``Help me to locate {expression} in the image and give me its bounding boxes.``;
* the answer wraps the box in ``<|begin_of_box|>...<|end_of_box|>``, as ``[x1,y1,x2,y2]`` with x divided by
  the image width and y by the height, times 1000 (0-1000 relative; the README allows other brackets);
* the answer comes after a thinking block (``<think>...</think>``; GLM-4.1V-Thinking always thinks,
  GLM-4.5V/4.6V think unless the chat template gets ``enable_thinking=False``).

vrh renders the chat with ``enable_thinking=False`` by default (:attr:`Glm4vAdapter.thinking`), so 4.5V/4.6V
answer at once; 4.1V-Thinking ignores the switch and needs a larger ``--max-new-tokens``. :meth:`parse_box`
drops the reasoning as every family does (:func:`vrh.data.boxes.strip_reasoning`: a box written while thinking,
or in a block never closed, is no answer), then reads the first ``<|begin_of_box|>`` span when there is one.
A teacher-forced answer is placed right after the generation prompt (and the empty think block), so detection
never scores thinking tokens.

Served model types: ``glm4v`` (GLM-4.1V-9B, GLM-4.6V-Flash) and ``glm46v`` (transformers' GLM-4.6V classes).
The MoE checkpoints (GLM-4.5V, GLM-4.6V 106B: ``glm4v_moe``) are not registered yet: no tiny build tests them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Box, register_adapter
from vrh.models.adapters.qwen_vl import QwenVLAdapter

if TYPE_CHECKING:
    import torch

BOX_OPEN, BOX_CLOSE = "<|begin_of_box|>", "<|end_of_box|>"
# tokens that end or pad a GLM turn; decode drops them and keeps the box and think markers
_TURN_TOKENS = ("<|endoftext|>", "<|user|>", "<|observation|>", "<|assistant|>", "<|system|>")


def box_span(text: str) -> str:
    """The inside of the first ``<|begin_of_box|>...<|end_of_box|>`` (to the end when unclosed), with ``<>``
    brackets read as ``[]`` (the README: "the bracket style may vary"); the text itself when no box marker."""
    start = text.find(BOX_OPEN)
    if start < 0:
        return text
    inner = text[start + len(BOX_OPEN):].split(BOX_CLOSE, 1)[0]
    return inner.replace("<", "[").replace(">", "]")


@register_adapter
class Glm4vAdapter(QwenVLAdapter):
    name = "glm4v"
    model_types = ("glm4v", "glm46v")
    box_convention = '<|begin_of_box|>[x1,y1,x2,y2]<|end_of_box|>, 0-1000 relative, after a think block'
    token_layout = 'one token per 28-px merged cell of the resized image, row-major (image_grid_thw), as Qwen2-VL'
    model_class = "Glm4vForConditionalGeneration"
    processor_class = "Glm4vProcessor"
    prompt_template = "Help me to locate {expression} in the image and give me its bounding boxes."
    thinking: bool = False  # passed to the chat template as enable_thinking (4.5V/4.6V honour it)

    _CLASSES = {"glm4v": ("Glm4vForConditionalGeneration", "Glm4vProcessor"),
                "glm46v": ("Glm46VForConditionalGeneration", "Glm46VProcessor")}

    def load(self, path: str, *, dtype: torch.dtype | None = None, device: str = "cpu",
             attn_implementation: str = "sdpa", device_map: str | dict | None = None):
        """Pick the model and processor classes from the checkpoint's ``model_type`` (glm4v or glm46v)."""
        from transformers import AutoConfig

        model_type = AutoConfig.from_pretrained(path, trust_remote_code=False).model_type
        if model_type not in self._CLASSES:
            raise ValueError(f"the glm4v adapter serves model types {sorted(self._CLASSES)}, not {model_type!r}")
        self.model_class, self.processor_class = self._CLASSES[model_type]
        return super().load(path, dtype=dtype, device=device, attn_implementation=attn_implementation,
                            device_map=device_map)

    # --- prompts -------------------------------------------------------------------------------
    def chat_text(self, processor: Any, prompt: str) -> str:
        """The rendered chat ending on a newline, so a teacher-forced answer starts where the model's own
        answer starts (after ``<|assistant|>\\n`` or after the closed empty think block)."""
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        from vrh.models import chat_templates

        with chat_templates.bounded(chat_templates.whose(processor)):
            chat = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                 enable_thinking=self.thinking)
        return chat if chat.endswith("\n") else chat + "\n"

    # --- answers -------------------------------------------------------------------------------
    def decode(self, processor: Any, token_ids: torch.Tensor) -> list[str]:
        """Keep the box and think markers (special tokens in GLM's tokenizer); drop padding and turn ends."""
        tok = processor.tokenizer
        drop = {t for t in (tok.pad_token, tok.eos_token, *_TURN_TOKENS) if t}
        texts = processor.batch_decode(token_ids, skip_special_tokens=False)
        for t in drop:
            texts = [s.replace(t, "") for s in texts]
        return texts

    def parse_box(self, text: str, meta: dict[str, Any], image_size: tuple[int, int]) -> Box | None:
        from vrh.data import boxes as grounding

        found = grounding.parse_box(box_span(grounding.strip_reasoning(text)))  # the box span of the answer
        return None if found is None else grounding.from_normalized(found[1], 1000, image_size)

    def format_box(self, box: Box, meta: dict[str, Any], image_size: tuple[int, int]) -> str:
        coords = json.dumps(self._to_frame(box, meta, image_size), separators=(",", ":"))  # "[x1,y1,x2,y2]"
        return f"{BOX_OPEN}{coords}{BOX_CLOSE}"

