"""World samples -> model tensors, without the (slow, per-image PIL) processor call in the training loop.

The result is numerically the processor's (tested in tests/lab/organism/test_train.py): same normalisation
(mean = std = 0.5 after /255), same prompt strings, the ``<image>`` placeholder expanded to the same
number of tokens, BOS prepended by the tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerFast

from vrh.core.regions import box_token_mask
from vrh.organism import world
from vrh_lab.organism.processor import GROUNDING_PROMPT, VQA_PROMPT, ImageSpec, format_box
from vrh_lab.organism.text_tasks import items_offset, text_prompt


def prompt_of(sample: dict[str, Any]) -> str:
    if sample["task"] == "text":  # text-only retrieval job (vrh_lab.organism.text_tasks): no image
        return text_prompt(sample)
    if sample["task"] == "grounding":
        return GROUNDING_PROMPT.format(expression=sample["expression"])
    return VQA_PROMPT.format(question=sample["question"])


def answer_of(sample: dict[str, Any], spec: ImageSpec) -> str:
    return format_box(sample["box"], spec) if sample["task"] in ("grounding", "text") else sample["answer"]


def pixels(images: list, spec: ImageSpec) -> torch.Tensor:
    arr = np.stack([np.asarray(im.convert("RGB"), dtype=np.float32) for im in images])  # [B, H, W, 3]
    if arr.shape[1] != spec.image_size or arr.shape[2] != spec.image_size:
        raise ValueError(f"world images must be {spec.image_size} px, got {arr.shape[1:3]}")
    arr = (arr / 255.0 - 0.5) / 0.5
    return torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous()  # [B, 3, H, W]


def _expand(prompt: str, spec: ImageSpec) -> str:
    return prompt.replace("<image>", " ".join(["<image>"] * spec.num_image_tokens))


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, S] right-padded
    attention_mask: torch.Tensor  # [B, S]
    labels: torch.Tensor  # [B, S], -100 except answer tokens and EOS
    pixel_values: torch.Tensor | None  # [B_img, 3, H, W], image samples only (None: text-only batch)
    visual: torch.Tensor  # [B, S] bool, key positions holding visual tokens
    text_query: torch.Tensor  # [B, S] bool, real positions after the image (prompt tail + answer)
    # [B, S] bool, visual positions whose patch overlaps the GT box (grounding) or the captioned box; for
    # text samples the referent's item tokens
    box_keys: torch.Tensor | None = None
    # [B_img, V] long, per image sample and visual token (row-major patches): colour / shape index of the
    # object covering the patch most (world.COLOURS / world.SHAPES order), -100 where no object does
    patch_colour: torch.Tensor | None = None
    patch_shape: torch.Tensor | None = None


def train_batch(samples: list[dict[str, Any]], tok: PreTrainedTokenizerFast, spec: ImageSpec) -> TrainBatch:
    prompts = [_expand(prompt_of(s), spec) for s in samples]
    answers = [answer_of(s, spec) for s in samples]
    p_ids = tok(prompts, add_special_tokens=True)["input_ids"]
    a_ids = tok(answers, add_special_tokens=False)["input_ids"]
    seqs = [p + a + [tok.eos_token_id] for p, a in zip(p_ids, a_ids)]
    S = max(len(s) for s in seqs)
    B = len(seqs)
    ids = torch.full((B, S), tok.pad_token_id, dtype=torch.long)
    labels = torch.full((B, S), -100, dtype=torch.long)
    mask = torch.zeros((B, S), dtype=torch.long)
    for b, (p, s) in enumerate(zip(p_ids, seqs)):
        ids[b, : len(s)] = torch.tensor(s)
        mask[b, : len(s)] = 1
        labels[b, len(p): len(s)] = torch.tensor(s[len(p):])
    image_id = tok.convert_tokens_to_ids("<image>")
    visual = ids == image_id
    last_visual = (visual.long() * torch.arange(S)).amax(dim=1, keepdim=True)  # [B, 1]
    text_query = (torch.arange(S)[None, :] > last_visual) & mask.bool()
    imaged = [s for s in samples if s["task"] != "text"]
    px = pixels([world.render(s["scene"]) for s in imaged], spec) if imaged else None
    box_keys = torch.zeros_like(visual)
    for b, s in enumerate(samples):
        if s["task"] == "text":
            first, end = s["target_words"]
            off = items_offset(tok)
            box_keys[b, off + first: off + end] = True
        elif s["task"] == "grounding" or s.get("kind") == "caption":
            inside = patches_overlapping(s["box"], spec)  # [V] bool
            box_keys[b, visual[b].nonzero().squeeze(1)[inside]] = True
    V = spec.num_image_tokens
    dense = [dense_targets(s["scene"], spec) for s in imaged]
    colour = torch.from_numpy(np.stack([d["colour"] for d in dense])) if dense else torch.zeros(0, V, dtype=torch.long)  # [B_img, V]
    shape = torch.from_numpy(np.stack([d["shape"] for d in dense])) if dense else torch.zeros(0, V, dtype=torch.long)  # [B_img, V]
    return TrainBatch(ids, mask, labels, px, visual, text_query, box_keys, colour, shape)


def patch_rects(spec: ImageSpec) -> torch.Tensor:
    """[grid*grid, 4] the xyxy pixel cell of each visual token, row-major like the tower's patch order."""
    g, p = spec.grid, spec.patch_size
    rows, cols = torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij")  # [g, g] each
    rects = torch.stack([cols * p, rows * p, (cols + 1) * p, (rows + 1) * p], -1)  # [g, g, 4]
    return rects.reshape(-1, 4).float()  # [g*g, 4]


def patches_overlapping(box, spec: ImageSpec) -> torch.Tensor:
    """[grid*grid] bool, row-major patches of the (un-resized world) image that overlap ``box``: vrh's key
    set K (:func:`vrh.core.regions.box_token_mask`, intersection area > 0) on the organism's patch cells."""
    return box_token_mask(patch_rects(spec), box)


def prompt_batch(samples: list[dict[str, Any]], tok: PreTrainedTokenizerFast,
                 spec: ImageSpec) -> dict[str, torch.Tensor]:
    """Left-padded prompts for ``generate`` (what the processor + tokenizer with padding_side=left give)."""
    prompts = [_expand(prompt_of(s), spec) for s in samples]
    enc = tok(prompts, add_special_tokens=True, padding=True, return_tensors="pt")
    imaged = [s for s in samples if s["task"] != "text"]
    if imaged:
        enc["pixel_values"] = pixels([world.render(s["scene"]) for s in imaged], spec)
    return dict(enc)


# --- dense per-patch targets (vision pretraining and the attribute probes) ---------------------------
COLOUR_IDX = {c: i for i, c in enumerate(world.COLOURS)}
SHAPE_IDX = {s: i for i, s in enumerate(world.SHAPES)}
SIZE_IDX = {s: i for i, s in enumerate(world.SIZES)}


def dense_targets(scene: world.Scene, spec: ImageSpec) -> dict[str, np.ndarray]:
    """Per patch (row-major, [G*G]): the object overlapping it most (-1: none) and that object's facts."""
    g, p = spec.grid, spec.patch_size
    owner = np.full(g * g, -1, dtype=np.int64)
    best = np.zeros(g * g)
    for i, o in enumerate(scene.objects):
        x1, y1, x2, y2 = o.box
        for r in range(g):
            oy = max(0, min(y2, (r + 1) * p) - max(y1, r * p))
            if oy <= 0:
                continue
            for c in range(g):
                ox = max(0, min(x2, (c + 1) * p) - max(x1, c * p))
                if ox * oy > best[r * g + c]:
                    best[r * g + c], owner[r * g + c] = ox * oy, i
    colour = np.array([COLOUR_IDX[scene.objects[i].colour] if i >= 0 else -100 for i in owner])
    shape = np.array([SHAPE_IDX[scene.objects[i].shape] if i >= 0 else -100 for i in owner])
    size = np.array([SIZE_IDX[scene.objects[i].size] if i >= 0 else -100 for i in owner])
    box = np.array([scene.objects[i].box if i >= 0 else (0, 0, 0, 0) for i in owner], dtype=np.float32)
    return {"obj": (owner >= 0).astype(np.float32), "colour": colour, "shape": shape, "size": size,
            "box": box / spec.image_size}  # box: [G*G, 4] in [0, 1]
