"""Magma's processor, ported (no remote code): the crops' image processor and the prompt's ``<image>``
expansion (the model and its token layout: :mod:`vrh.models.adapters.magma.modeling`).

Image processing (``image_processing_magma.py``): convert to RGB, scale to [0, 1], normalise with the CLIP mean/std,
pick the best ``(cols * S, rows * S)`` canvas with ``rows * cols <= num_crops`` (LLaVA's ``select_best_resolution``),
resize to it **bilinearly without keeping the aspect ratio** (``F.interpolate``, no antialias), cut it into
``rows x cols`` crops of ``S x S``, row-major, ``image_sizes = (rows, cols)``. ``S`` is ``base_img_size``: the code's
default is 768 (its docstring: "24x24" features), but Magma-8B's ``preprocessor_config.json`` sets 512 and
``num_crops`` 4, so a crop gives ``16 x 16`` features; the vLLM port's count ``rows * cols * 256 + rows * 16`` agrees.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vrh.models.adapters.magma.modeling import CONVNEXT_STRIDE
from vrh.models.canvas import select_best_resolution

IMAGE_TOKEN = "<image>"
PROCESSOR_FILE = "preprocessor_config.json"


def best_grid(width: int, height: int, num_crops: int, side: int) -> tuple[int, int]:
    """(rows, cols) of the ``cols * side x rows * side`` canvas the remote ``select_best_resolution`` picks for a
    ``width x height`` image among ``rows * cols <= num_crops``: the most image pixels kept, then the least waste.

    >>> best_grid(1000, 500, 4, 512)
    (1, 2)
    """
    # the remote code's order: width factor outer, height factor inner
    canvases = [(cols * side, rows * side) for cols in range(1, num_crops + 1) for rows in range(1, num_crops // cols + 1)]
    best = select_best_resolution((width, height), canvases)
    return (1, 1) if best is None else (best[1] // side, best[0] // side)  # no candidate (num_crops < 1): one crop


class MagmaImageProcessor:
    """``MagmaImageProcessor`` ported to PIL + torch (no torchvision); settings from ``preprocessor_config.json``."""

    def __init__(self, base_img_size: int = 768, num_crops: int = 1, anyres_strategy: str = "global",
                 do_convert_rgb: bool = True, image_mean=(0.48145466, 0.4578275, 0.40821073),
                 image_std=(0.26862954, 0.26130258, 0.27577711), **_: Any):
        if base_img_size % CONVNEXT_STRIDE:
            raise ValueError(f"base_img_size {base_img_size} is not a multiple of the tower's stride 32")
        self.base_img_size, self.num_crops, self.anyres_strategy = int(base_img_size), int(num_crops), anyres_strategy
        self.do_convert_rgb, self.image_mean, self.image_std = do_convert_rgb, list(image_mean), list(image_std)

    def to_dict(self) -> dict[str, Any]:
        return {"anyres_strategy": self.anyres_strategy, "base_img_size": self.base_img_size,
                "do_convert_rgb": self.do_convert_rgb, "image_mean": self.image_mean, "image_std": self.image_std,
                "image_processor_type": "MagmaImageProcessor", "num_crops": self.num_crops,
                "processor_class": "MagmaProcessor"}

    def grid(self, width: int, height: int) -> tuple[int, int]:
        """(rows, cols) of crops for a ``width x height`` image."""
        return best_grid(width, height, self.num_crops, self.base_img_size)

    def __call__(self, image: Any) -> tuple[torch.Tensor, tuple[int, int]]:
        """One PIL image -> (crops [rows * cols, 3, S, S] row-major, (rows, cols))."""
        if self.do_convert_rgb:
            image = image.convert("RGB")
        x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)  # (3, H, W)
        mean, std = torch.tensor(self.image_mean).view(3, 1, 1), torch.tensor(self.image_std).view(3, 1, 1)
        x = (x - mean) / std
        rows, cols = self.grid(image.width, image.height)
        s = self.base_img_size
        x = F.interpolate(x[None], size=(rows * s, cols * s), mode="bilinear")  # (1, 3, rows*S, cols*S)
        crops = x.unfold(2, s, s).unfold(3, s, s)  # (1, 3, rows, cols, S, S)
        return crops.permute(0, 2, 3, 1, 4, 5).reshape(rows * cols, 3, s, s), (rows, cols)


class MagmaProcessor:
    """Image processor + tokenizer; expands each ``<image>`` into the image's ``R * (C + 1)`` tokens (``R x C``
    features plus a row separator per row; ``row_separator`` False: ``R * C``)."""

    image_token = IMAGE_TOKEN

    def __init__(self, image_processor: MagmaImageProcessor, tokenizer: Any, row_separator: bool = True):
        self.image_processor, self.tokenizer, self.row_separator = image_processor, tokenizer, row_separator

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> MagmaProcessor:
        from transformers import PreTrainedTokenizerFast

        file = Path(folder) / PROCESSOR_FILE
        if not file.is_file():
            raise FileNotFoundError(f"{folder} has no {PROCESSOR_FILE} (Magma's image processor settings)")
        from vrh.infra.json_text import read_json

        settings = read_json(file, max_bytes=2**20, max_depth=16, expect=dict)
        if settings.get("image_processor_type") != "MagmaImageProcessor":
            raise ValueError(f"{file} names {settings.get('image_processor_type')!r}, not MagmaImageProcessor")
        return cls(MagmaImageProcessor(**settings), PreTrainedTokenizerFast.from_pretrained(str(folder), trust_remote_code=False))

    def save_pretrained(self, folder: str | Path) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / PROCESSOR_FILE).write_text(json.dumps(self.image_processor.to_dict(), indent=2) + "\n",
                                                   encoding="utf-8")
        self.tokenizer.save_pretrained(str(folder))

    def num_image_tokens(self, rows: int, cols: int) -> int:
        g = self.image_processor.base_img_size // CONVNEXT_STRIDE
        return rows * g * (cols * g + int(self.row_separator))

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer.apply_chat_template(*args, **kwargs)

    def batch_decode(self, *args: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(*args, **kwargs)

    def __call__(self, images: list, text: list[str], padding: bool | str = True, return_tensors: str = "pt",
                 return_offsets_mapping: bool = False, return_text_replacement_offsets: bool = False) -> dict:
        """One image per text. Returns ``input_ids``, ``attention_mask``, ``pixel_values`` [B, N_max, 3, S, S]
        (zero-padded crops), ``image_sizes`` [B, 2] (rows, cols), and on request ``offset_mapping`` and
        ``text_replacement_offsets`` (per text, where its ``<image>`` went: ``span`` in the given text,
        ``new_span`` in the expanded one)."""
        if len(images) != len(text):
            raise ValueError(f"{len(images)} images for {len(text)} texts; Magma's processor takes one image per text")
        crops, grids, expanded, replaced = [], [], [], []
        for image, t in zip(images, text, strict=True):
            if t.count(IMAGE_TOKEN) != 1:
                raise ValueError(f"each text needs exactly one {IMAGE_TOKEN}, got {t.count(IMAGE_TOKEN)}")
            c, grid = self.image_processor(image)
            crops.append(c)
            grids.append(grid)
            at = t.index(IMAGE_TOKEN)
            repl = IMAGE_TOKEN * self.num_image_tokens(*grid)
            expanded.append(t[:at] + repl + t[at + len(IMAGE_TOKEN):])
            replaced.append([{"type": "image", "span": (at, at + len(IMAGE_TOKEN)),
                              "new_span": (at, at + len(repl)), "replacement": repl}])
        enc = dict(self.tokenizer(expanded, padding=padding, return_tensors=return_tensors,
                                  return_offsets_mapping=return_offsets_mapping))
        s = self.image_processor.base_img_size
        pixel_values = torch.zeros(len(crops), max(len(c) for c in crops), 3, s, s)
        for b, c in enumerate(crops):
            pixel_values[b, :len(c)] = c
        enc["pixel_values"], enc["image_sizes"] = pixel_values, torch.tensor(grids)
        if return_text_replacement_offsets:
            enc["text_replacement_offsets"] = replaced
        return enc
