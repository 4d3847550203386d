"""Organism E's samples -> model tensors, through its real ``LlavaProcessor``.

The world and the answer format are organisms A's and C's (their ``vrh.json``: ``where is {expression} ?`` ->
``[ x1 , y1 , x2 , y2 ]`` in pixels of the 112-px image), written into E's folder as its ``vrh.json`` so that
``--model organism:organism_e`` reads them through the LLaVA adapter; VQA questions go in as written. The answer
follows the adapter's ``answer_sep`` (one space after the generation prompt), is tokenized on its own and
appended to the prompt's tokens (exactly what generation continues from), and ends with ``<|im_end|>``.
"""

from __future__ import annotations

from typing import Any

import torch

from vrh.models.adapters.llava import LlavaAdapter
from vrh.organism import world
from vrh_lab.organism import records

VRH_SETTINGS = {"grounding_prompt": "where is {expression} ?", "vqa_prompt": "{question}",
                "box_template": "[ {x1} , {y1} , {x2} , {y2} ]"}
ADAPTER = LlavaAdapter()
ADAPTER.configure(VRH_SETTINGS)
END = "<|im_end|>"


def prompt_of(sample: dict[str, Any]) -> str:
    return records.prompt_of(ADAPTER, sample)


def answer_of(sample: dict[str, Any]) -> str:
    return records.answer_of(ADAPTER, sample)


def chat(proc, sample: dict[str, Any]) -> str:
    return ADAPTER.chat_text(proc, prompt_of(sample))


def prompt_batch(proc, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Left-padded prompts (with pixels) for ``generate``."""
    proc.tokenizer.padding_side = "left"
    images = [world.render(s["scene"]) for s in samples]
    enc = proc(text=[chat(proc, s) for s in samples], images=images, padding=True, return_tensors="pt",
               add_special_tokens=False)
    return dict(enc)


def train_batch(proc, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Right-padded prompt + answer + ``<|im_end|>``; ``labels`` -100 but on the answer's tokens."""
    enc = prompt_batch(proc, samples)
    tok = proc.tokenizer
    rows, labels = [], []
    for b, s in enumerate(samples):
        prompt = enc["input_ids"][b][enc["attention_mask"][b].bool()]
        answer = torch.tensor(tok(ADAPTER.answer_sep + answer_of(s) + END, add_special_tokens=False)["input_ids"])
        rows.append(torch.cat([prompt, answer]))
        labels.append(torch.cat([torch.full_like(prompt, -100), answer]))
    width = max(len(r) for r in rows)

    def stack(xs, fill):
        return torch.stack([torch.cat([x, torch.full((width - len(x),), fill, dtype=x.dtype)]) for x in xs])

    return {"input_ids": stack(rows, tok.pad_token_id), "attention_mask": stack([torch.ones_like(r) for r in rows], 0),
            "labels": stack(labels, -100), "pixel_values": enc["pixel_values"]}  # [B, T] each; pixels [B, 3, H, W]


def stream_sample(seed: int, index: int, level: str, vqa_frac: float) -> dict[str, Any]:
    """Sample ``index`` of the training stream: VQA with probability ``vqa_frac``, else grounding at ``level``."""
    rng = world.seeded_rng(seed, index, "organism-e-mixture")
    if rng.random() < vqa_frac:
        return world.vqa_sample(seed, index)
    return world.grounding_sample(seed, index, level=level)
