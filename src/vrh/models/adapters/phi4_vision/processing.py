"""Phi-4-Reasoning-Vision's processor, ported (no remote code): the image processor and the text's
piecewise tokenization around ``<image>`` (the model is :mod:`vrh.models.adapters.phi4_vision.modeling`).

Image processing (``Siglip2ImageProcessorNoUpscale``): convert to RGB; with ``n = (H // 16) * (W // 16)`` patches,
the target size is ``get_image_size_for_max_num_patches`` for ``min_num_patches`` when ``n`` is below it, for
``max_num_patches`` when above, else for ``n`` itself (aspect kept, sides multiples of 16, so even an image in range
is resized slightly); PIL bilinear resize of the 8-bit image, scale to [0, 1], normalise with mean = std = 0.5, cut
into 16 x 16 patches row-major (each flattened ``(p, p, C)``). One LM token per patch, no tiles, no separators:
token ``k`` is patch ``(k // w, k % w)`` of the ``h x w`` grid (``spatial_shapes``). The remote pads every image to
``max_num_patches`` rows; :class:`Phi4VisionImageProcessor` pads to the longest image of the batch, which changes no
feature (padding rows are masked out of the tower's attention and dropped).

Text (``tokenizer_image_token``): the chat text (user content ``"<image>\\n" + prompt``, the checkpoint's chat
template) is split at ``<image>``, each piece tokenized on its own, and one ``IMAGE_TOKEN_INDEX = -200`` spliced in
between, which the model replaces by the image's features. :class:`Phi4VisionProcessor` tokenizes the pieces the
same way and splices ``n`` copies of an in-vocabulary placeholder (``<image>``, added to the tokenizer when absent)
instead, one position per feature, so every position of ``input_ids`` is a position of the language model; the
model embeds the text ids and scatters the features into the placeholder positions. The remote code's truncation
of the embedded sequence to ``tokenizer_model_max_length`` (8,192) is not reproduced: vrh runs a sequence up to the
model's 32,768 positions (:func:`vrh.models.generation.check_batch_fits` refuses longer ones); one image of at most
3,600 tokens and a grounding prompt stay far below 8,192.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

IMAGE_TOKEN = "<image>"  # the in-vocabulary placeholder, one per feature (module docstring)


class Phi4VisionImageProcessor:
    """``Siglip2ImageProcessorNoUpscale`` in PIL and numpy (no torchvision); see the module docstring."""

    image_mean = (0.5, 0.5, 0.5)
    image_std = (0.5, 0.5, 0.5)
    rescale_factor = 1 / 255
    resample = 2  # PIL bilinear, as the remote class's default (and preprocessor_config.json's "resample")

    def __init__(self, patch_size: int = 16, min_num_patches: int = 256, max_num_patches: int = 3600):
        if not 0 < min_num_patches <= max_num_patches:
            raise ValueError(f"need 0 < min_num_patches <= max_num_patches, got {min_num_patches}, {max_num_patches}")
        self.patch_size, self.min_num_patches, self.max_num_patches = patch_size, min_num_patches, max_num_patches

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Phi4VisionImageProcessor:
        """As the remote processor's ``from_pretrained`` builds it: from ``config.json`` (patch size from
        ``vision_config`` or the tower name, the patch-count bounds from the top level)."""
        vision, name = config.get("vision_config") or {}, (config.get("mm_vision_tower") or "").lower()
        patch = vision.get("patch_size", 14 if "patch14" in name else 16)
        return cls(patch, int(config.get("min_num_patches", 256)), int(config.get("max_num_patches", 3600)))

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) the image is resized to: the patch-count bounds, aspect kept, multiples of the patch."""
        from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches

        p = self.patch_size
        n = max((height // p) * (width // p), 1)
        budget = min(max(n, self.min_num_patches), self.max_num_patches)
        h, w = get_image_size_for_max_num_patches(image_height=height, image_width=width, patch_size=p,
                                                  max_num_patches=budget)
        return int(w), int(h)

    def __call__(self, images: list) -> dict[str, torch.Tensor]:
        """``pixel_values`` [B, N, p*p*C] (N = the batch's most patches), ``pixel_attention_mask`` [B, N] and
        ``spatial_shapes`` [B, 2] = (rows, cols) of patches."""
        p = self.patch_size
        mean, std = np.asarray(self.image_mean), np.asarray(self.image_std)
        patches, shapes = [], []
        for image in images:
            w, h = self.target_size(*image.size)
            pixels = np.asarray(image.convert("RGB").resize((w, h), resample=self.resample), dtype=np.float64)
            pixels = ((pixels * self.rescale_factor - mean) / std).astype(np.float32)  # [h, w, C]
            rows, cols = h // p, w // p
            grid = pixels.reshape(rows, p, cols, p, 3).transpose(0, 2, 1, 3, 4)  # [rows, cols, p, p, C]
            patches.append(grid.reshape(rows * cols, p * p * 3))  # row-major patches, each (p, p, C)
            shapes.append((rows, cols))
        n = max(len(x) for x in patches)
        values = torch.zeros(len(images), n, p * p * 3)
        mask = torch.zeros(len(images), n, dtype=torch.long)
        for b, x in enumerate(patches):
            values[b, :len(x)] = torch.from_numpy(x)
            mask[b, :len(x)] = 1
        return {"pixel_values": values, "pixel_attention_mask": mask,
                "spatial_shapes": torch.tensor(shapes, dtype=torch.long)}


class Phi4VisionProcessor:
    """Tokenizer + :class:`Phi4VisionImageProcessor`: the remote processor's text and pixels, with the image
    placeholder expanded to one in-vocabulary ``<image>`` token per feature (see the module docstring)."""

    image_token = IMAGE_TOKEN

    def __init__(self, image_processor: Phi4VisionImageProcessor, tokenizer: Any):
        if IMAGE_TOKEN not in tokenizer.get_vocab():
            tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]},
                                         replace_extra_special_tokens=False)
        self.image_processor, self.tokenizer = image_processor, tokenizer

    @property
    def image_token_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN))

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> Phi4VisionProcessor:
        """The tokenizer (and chat template) saved in ``folder``; the image settings from its ``config.json``.
        ``trust_remote_code=False`` said outright: the ``auto_map`` of the released ``config.json`` otherwise makes
        ``AutoTokenizer`` ask on the terminal whether to run the checkpoint's code."""
        from transformers import AutoTokenizer

        from vrh.models.composed import read_config, tokenizer_config

        tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False, config=tokenizer_config(folder))
        return cls(Phi4VisionImageProcessor.from_config(read_config(folder)), tokenizer)

    def save_pretrained(self, folder: str | Path) -> None:
        """The tokenizer files (the image settings live in the model's ``config.json``, as in the release)."""
        self.tokenizer.save_pretrained(str(folder))

    def chat_text(self, prompt: str) -> str:
        """The rendered chat of one user turn, ``"<image>\\n" + prompt``, plus the generation prompt (the remote
        ``prepare_inputs_for_generation``)."""
        from vrh.models import chat_templates

        messages = [{"role": "user", "content": f"{IMAGE_TOKEN}\n{prompt}"}]
        with chat_templates.bounded(chat_templates.whose(self.tokenizer)):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _tokens(self, text: str, n_image: int) -> tuple[list[int], list[tuple[int, int]]]:
        """``text``'s ids and character offsets as the remote ``tokenizer_image_token``: pieces between ``<image>``
        tokenized on their own, a leading BOS kept once, ``n_image`` placeholders (offsets: the ``<image>``
        span) where the one ``<image>`` was."""
        pieces = text.split(IMAGE_TOKEN)
        if len(pieces) != 2:
            raise ValueError(f"expected one {IMAGE_TOKEN!r} in the text, got {len(pieces) - 1}")
        enc = [self.tokenizer(piece, return_offsets_mapping=True) for piece in pieces]
        bos = self.tokenizer.bos_token_id
        skip = 1 if enc[0]["input_ids"][:1] == [bos] and bos is not None else 0
        ids: list[int] = enc[0]["input_ids"][:skip]
        offsets: list[tuple[int, int]] = [(0, 0)] * skip
        start = 0
        for k, e in enumerate(enc):
            if k:
                ids += [self.image_token_id] * n_image
                offsets += [(start - len(IMAGE_TOKEN), start)] * n_image
            ids += e["input_ids"][skip:]
            offsets += [(start + a, start + b) if b > a else (0, 0) for a, b in e["offset_mapping"][skip:]]
            start += len(pieces[k]) + len(IMAGE_TOKEN)
        return ids, offsets

    def __call__(self, text: list[str], images: list) -> dict[str, torch.Tensor]:
        """One image per text: ids padded to one length on the tokenizer's padding side, ``attention_mask``,
        ``offset_mapping`` [B, S, 2] (characters of each text; (0, 0) for padding and added tokens) and the pixels."""
        if len(text) != len(images):
            raise ValueError(f"{len(text)} texts for {len(images)} images; one image per text")
        pixels = self.image_processor(images)
        counts = [int(h * w) for h, w in pixels["spatial_shapes"].tolist()]
        encoded = [self._tokens(t, n) for t, n in zip(text, counts)]
        S = max(len(ids) for ids, _ in encoded)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.full((len(text), S), pad, dtype=torch.long)
        attention = torch.zeros(len(text), S, dtype=torch.long)
        offsets = torch.zeros(len(text), S, 2, dtype=torch.long)
        left = self.tokenizer.padding_side == "left"
        for b, (ids, offs) in enumerate(encoded):
            span = slice(S - len(ids), S) if left else slice(0, len(ids))
            input_ids[b, span], attention[b, span] = torch.tensor(ids), 1
            offsets[b, span] = torch.tensor(offs, dtype=torch.long).reshape(-1, 2)
        return {"input_ids": input_ids, "attention_mask": attention, "offset_mapping": offsets, **pixels}

    def batch_decode(self, *args: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(*args, **kwargs)
