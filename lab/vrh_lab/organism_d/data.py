"""Organism D's samples -> model tensors, through its real ``Gemma3Processor``.

The prompts and answers are the Gemma 3 adapter's own (``Gemma3Adapter.prompt_template``, ``format_box``: the
``{"box_2d": [ymin, xmin, ymax, xmax]}`` 0-1000 JSON), so ``--model organism:organism_d`` needs no setting of
its own; VQA questions go in as written (``Gemma3Adapter.vqa_prompt``). The answer is tokenized on its own and
appended to the prompt's tokens, exactly what generation continues from, and ends with ``<end_of_turn>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vrh.models.adapters.gemma3 import Gemma3Adapter
from vrh.models import gemma_base
from vrh.organism import world
from vrh_lab.organism import records

ADAPTER = Gemma3Adapter()
END = "<end_of_turn>"


def processor(folder: Path, image_size: int = world.IMAGE_SIZE, tokens: int = 49):
    """The real ``Gemma3Processor`` (PIL image processor, no torchvision) over the base's tokenizer: images
    squashed to ``image_size`` px, normalised to [-1, 1], ``tokens`` soft tokens per image."""
    from transformers import AutoTokenizer, Gemma3ImageProcessorPil, Gemma3Processor

    tok = AutoTokenizer.from_pretrained(str(folder))
    ip = Gemma3ImageProcessorPil(size={"height": image_size, "width": image_size}, image_mean=[0.5] * 3,
                                 image_std=[0.5] * 3, resample=2)
    return Gemma3Processor(image_processor=ip, tokenizer=tok, chat_template=gemma_base.CHAT_TEMPLATE,
                           image_seq_length=tokens)


def prompt_of(sample: dict[str, Any]) -> str:
    return records.prompt_of(ADAPTER, sample)


def answer_of(sample: dict[str, Any]) -> str:
    return records.answer_of(ADAPTER, sample)


def chat(proc, sample: dict[str, Any]) -> str:
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt_of(sample)}]}]
    return proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def prompt_batch(proc, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Left-padded prompts (with pixels) for ``generate``."""
    proc.tokenizer.padding_side = "left"
    images = [[world.render(s["scene"])] for s in samples]
    enc = proc(text=[chat(proc, s) for s in samples], images=images, padding=True, return_tensors="pt",
               add_special_tokens=False)
    return dict(enc)


def train_batch(proc, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Right-padded prompt + answer + ``<end_of_turn>``; ``labels`` -100 but on the answer's tokens."""
    enc = prompt_batch(proc, samples)
    tok = proc.tokenizer
    rows, types, labels = [], [], []
    for b, s in enumerate(samples):
        keep = enc["attention_mask"][b].bool()
        prompt = enc["input_ids"][b][keep]
        ttype = enc["token_type_ids"][b][keep]
        answer = torch.tensor(tok(answer_of(s) + END, add_special_tokens=False)["input_ids"])
        rows.append(torch.cat([prompt, answer]))
        types.append(torch.cat([ttype, torch.zeros_like(answer)]))
        labels.append(torch.cat([torch.full_like(prompt, -100), answer]))
    width = max(len(r) for r in rows)
    pad = tok.pad_token_id

    def stack(xs, fill):
        return torch.stack([torch.cat([x, torch.full((width - len(x),), fill, dtype=x.dtype)]) for x in xs])

    ids = stack(rows, pad)  # [B, T]
    return {"input_ids": ids, "attention_mask": stack([torch.ones_like(r) for r in rows], 0),
            "token_type_ids": stack(types, 0), "labels": stack(labels, -100), "pixel_values": enc["pixel_values"]}


def stream_sample(seed: int, index: int, level: str, vqa_frac: float) -> dict[str, Any]:
    """Sample ``index`` of the training stream: VQA with probability ``vqa_frac``, else grounding at ``level``."""
    rng = world.seeded_rng(seed, index, "organism-d-mixture")
    if rng.random() < vqa_frac:
        return world.vqa_sample(seed, index)
    return world.grounding_sample(seed, index, level=level)
