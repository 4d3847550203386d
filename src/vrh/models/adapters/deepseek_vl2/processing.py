"""DeepSeek-VL2's processor, ported (no remote code): the global letterbox view and the local tiles on the
best candidate canvas, and the ``<image>`` tokens of the token layout
(:mod:`vrh.models.adapters.deepseek_vl2.modeling`'s docstring)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from vrh.models.canvas import select_best_resolution  # the remote processor's canvas choice

GROUNDING_TOKENS = ["<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>"]
CHAT_TOKENS = ["<|User|>", "<|Assistant|>"]
PROCESSOR_FILE = "processor_config.json"


def contain_size(size: tuple[int, int], box: tuple[int, int]) -> tuple[int, int]:
    """The size ``PIL.ImageOps.contain`` resizes a ``size`` image to inside ``box`` (its rounding)."""
    (w, h), (bw, bh) = size, box
    if w / h > bw / bh:
        return bw, round(h / w * bw)
    if w / h < bw / bh:
        return round(w / h * bh), bh
    return bw, bh


def letterbox(image: Image.Image, box: tuple[int, int], color: tuple[int, ...]) -> tuple[Image.Image, tuple[int, ...]]:
    """``ImageOps.pad(image, box, color=color)`` (bicubic, centred) and where the image went:
    ``(x0, y0, resized_w, resized_h)`` on the canvas."""
    rw, rh = contain_size(image.size, box)
    x0, y0 = round((box[0] - rw) * 0.5), round((box[1] - rh) * 0.5)
    canvas = Image.new("RGB", box, color)
    canvas.paste(image.resize((rw, rh), Image.Resampling.BICUBIC), (x0, y0))
    return canvas, (x0, y0, rw, rh)


class DeepseekVL2Processor:
    """The remote ``DeepseekVLV2Processor`` without torchvision: the same special tokens added in the same order,
    the same views (global letterbox + local tiles on the best candidate canvas) and the same ``<image>`` count.
    Reads and writes the published ``processor_config.json`` next to the tokenizer files."""

    def __init__(self, tokenizer: Any, candidate_resolutions: list[list[int]], patch_size: int, downsample_ratio: int,
                 image_mean=(0.5, 0.5, 0.5), image_std=(0.5, 0.5, 0.5), normalize: bool = True,
                 image_token: str = "<image>", pad_token: str = "<\uff5c\u2581pad\u2581\uff5c>", **settings: Any):
        self.tokenizer = tokenizer
        self.candidate_resolutions = [list(map(int, c)) for c in candidate_resolutions]
        self.patch_size, self.downsample_ratio = int(patch_size), int(downsample_ratio)
        self.image_mean, self.image_std, self.normalize = list(image_mean), list(image_std), bool(normalize)
        self.image_token, self.pad_token, self.settings = image_token, pad_token, settings
        if tokenizer.pad_token is None:
            tokenizer.add_special_tokens({"pad_token": pad_token})
        if image_token not in tokenizer.get_vocab():
            tokenizer.add_special_tokens({"additional_special_tokens": [image_token]})
        for group in (GROUNDING_TOKENS, CHAT_TOKENS):  # as the remote processor: appended when missing
            tokenizer.add_special_tokens({"additional_special_tokens": group})
        self.image_token_id = int(tokenizer.convert_tokens_to_ids(image_token))

    @property
    def image_size(self) -> int:
        return self.candidate_resolutions[0][0]

    @property
    def grid(self) -> int:
        """Tokens per tile side: ceil((S // patch) / downsample)."""
        return math.ceil((self.image_size // self.patch_size) / self.downsample_ratio)

    @property
    def seen_px(self) -> int:
        """Tile pixels the ViT's patches cover (384 // 14 * 14 = 378; the rest of the tile is never read)."""
        return self.image_size // self.patch_size * self.patch_size

    def num_image_tokens(self, nw: int, nh: int) -> int:
        g = self.grid
        return g * (g + 1) + 1 + nh * g * (nw * g + 1)

    def views(self, image: Image.Image) -> tuple[torch.Tensor, tuple[int, int], dict[str, Any]]:
        """``(tiles (1 + nw*nh, 3, S, S), (nw, nh), geometry)``: the global view, then the local tiles row-major."""
        image = image.convert("RGB")
        s = self.image_size
        color = tuple(int(m * 255) for m in self.image_mean)
        best = select_best_resolution(image.size, self.candidate_resolutions)
        glob, gplace = letterbox(image, (s, s), color)
        local, lplace = letterbox(image, best, color)
        nw, nh = best[0] // s, best[1] // s
        crops = [glob] + [local.crop((j * s, i * s, (j + 1) * s, (i + 1) * s)) for i in range(nh) for j in range(nw)]
        arr = np.stack([np.asarray(c, dtype=np.float32) / 255.0 for c in crops])  # (T, S, S, 3)
        if self.normalize:
            arr = (arr - np.asarray(self.image_mean, np.float32)) / np.asarray(self.image_std, np.float32)
        geometry = {"global_place": gplace, "local_place": lplace, "local_canvas": best}
        return torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous(), (nw, nh), geometry

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Ids without BOS/EOS, and each token's character span in ``text``."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def batch_decode(self, ids: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(ids, **kwargs)

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return self.tokenizer.decode(ids, **kwargs)

    def save_pretrained(self, directory: str | Path) -> None:
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(str(folder))
        config = {**self.settings, "candidate_resolutions": self.candidate_resolutions,
                  "patch_size": self.patch_size, "downsample_ratio": self.downsample_ratio,
                  "image_mean": self.image_mean, "image_std": self.image_std, "normalize": self.normalize,
                  "image_token": self.image_token, "pad_token": self.pad_token,
                  "processor_class": "DeepseekVLV2Processor"}
        (folder / PROCESSOR_FILE).write_text(json.dumps(config, indent=2), encoding="utf-8")

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> DeepseekVL2Processor:
        from transformers import AutoTokenizer

        folder = Path(directory)
        file = folder / PROCESSOR_FILE
        if not file.is_file():
            raise FileNotFoundError(f"{folder} has no {PROCESSOR_FILE} (DeepSeek-VL2's processor settings)")
        from vrh.infra.json_text import read_json

        config = read_json(file, max_bytes=2**20, max_depth=16, expect=dict)
        missing = [k for k in ("candidate_resolutions", "patch_size", "downsample_ratio") if k not in config]
        if missing:
            raise ValueError(f"{file} lacks {', '.join(missing)}")
        config.pop("processor_class", None)
        from vrh.models.composed import tokenizer_config

        return cls(AutoTokenizer.from_pretrained(str(folder), config=tokenizer_config(folder), trust_remote_code=False), **config)
