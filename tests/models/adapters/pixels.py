"""Read back which input pixels each visual token was computed from, per ``pixel_values`` layout.

Why: the pixel-content test must not reuse an adapter's own geometry. An image whose pixels encode their
coordinates (R = x, G = y, B = 255 marks "inside the original image") goes through the real processor; a
reader below cuts ``pixel_values`` the way the family's model consumes it (independently of the adapter),
and :func:`check_pixels` asserts every token's pixels carry coordinates from the rectangle the adapter
claims. A new family adds one reader to :data:`READERS` (the suite fails for an adapter without one).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from PIL import Image

from vrh.testing.tiny_deepseek_vl2 import deepseek_vl2_pixels
from vrh.testing.tiny_magma import magma_pixels

from .pixel_readers import idefics3_pixels, llava_next_pixels, llava_onevision_pixels, mllama_pixels


def coord_image(width: int, height: int) -> Image.Image:
    """R = x, G = y (both < 256), B = 255: each pixel says where it came from."""
    if width > 256 or height > 256:
        raise ValueError(f"coordinates must fit a byte: {width} x {height} is too large")
    y, x = np.mgrid[0:height, 0:width]
    return Image.fromarray(np.stack([x, y, np.full_like(x, 255)], axis=-1).astype(np.uint8))


def _unnormalize(processor, px: np.ndarray) -> np.ndarray:
    """[..., C] normalized values -> 0-255."""
    ip = processor.image_processor
    mean, std = np.asarray(ip.image_mean, dtype=np.float64), np.asarray(ip.image_std, dtype=np.float64)
    return (px * std + mean) * 255


def qwen_pixels(batch, b: int, processor) -> list[np.ndarray | None]:
    """Qwen2/2.5/3-VL, GLM-4V: ``pixel_values`` [sum_t*h*w, C*T*P*P], m*m consecutive rows per token."""
    ip = processor.image_processor
    pv = batch.inputs["pixel_values"].double().numpy()
    grids = batch.inputs["image_grid_thw"].tolist()
    start = sum(t * h * w for t, h, w in grids[:b])
    t, gh, gw = grids[b]
    m, p = ip.merge_size, ip.patch_size
    rows = pv[start:start + t * gh * gw].reshape(-1, m * m, 3, ip.temporal_patch_size, p, p)  # [V, m*m, C, T, P, P]
    # first frame; the m*m patches of a token are its merge window, row-major: [m, m, C, P, P] -> [m*P, m*P, C]
    windows = [tok[:, :, 0].reshape(m, m, 3, p, p).transpose(0, 3, 1, 4, 2).reshape(m * p, m * p, 3) for tok in rows]
    return [_unnormalize(processor, w) for w in windows]


def llava_pixels(batch, b: int, processor) -> list[np.ndarray | None]:
    """LLaVA: ``pixel_values`` [B, C, H, W] crop, patch k = row-major (k // cols, k % cols) after prefix
    tokens (CLS), which get None (they pool the whole crop)."""
    p = processor.patch_size
    img = _unnormalize(processor, batch.inputs["pixel_values"][b].double().numpy().transpose(1, 2, 0))  # [H, W, C]
    rows, cols = img.shape[0] // p, img.shape[1] // p
    out: list[np.ndarray | None] = [None] * (len(batch.visual_positions[b]) - rows * cols)
    for k in range(rows * cols):
        i, j = divmod(k, cols)
        out.append(img[i * p:(i + 1) * p, j * p:(j + 1) * p])  # [P, P, C]
    return out


def internvl_pixels(batch, b: int, processor) -> list[np.ndarray | None]:
    """InternVL: ``pixel_values`` [sum tiles, C, T, T], the samples' tiles in order; a tile gives
    ``image_seq_length`` = n x n tokens, token k of a tile = its (k // n, k % n) cell of T/n pixels (the ViT's
    row-major patches, merged 2 x 2 row-major by the pixel shuffle: see test_internvl.py)."""
    per_tile = int(processor.image_seq_length)
    n = math.isqrt(per_tile)
    pv = batch.inputs["pixel_values"].double().numpy()
    start = sum(len(v) for v in batch.visual_positions[:b]) // per_tile
    tiles = pv[start:start + len(batch.visual_positions[b]) // per_tile].transpose(0, 2, 3, 1)  # [T, H, W, C]
    cell = tiles.shape[1] // n
    out: list[np.ndarray | None] = []
    for tile in _unnormalize(processor, tiles):
        for k in range(per_tile):
            i, j = divmod(k, n)
            out.append(tile[i * cell:(i + 1) * cell, j * cell:(j + 1) * cell])  # [cell, cell, C]
    return out


def naflex_pixels(batch, b: int, processor) -> list[np.ndarray | None]:
    """SigLIP2 NaFlex (Phi-4-RV): ``pixel_values`` [B, N, P*P*C], the first h*w rows (``spatial_shapes[b]`` = (h, w))
    the resized image's patches row-major, each a flattened (P, P, C) square; one token per patch."""
    p = processor.image_processor.patch_size
    h, w = batch.inputs["spatial_shapes"][b].tolist()
    rows = batch.inputs["pixel_values"][b, :h * w].double().numpy().reshape(h * w, p, p, 3)  # [V, P, P, C]
    return [_unnormalize(processor, r) for r in rows]


# adapter name -> reader
READERS: dict[str, Callable] = {
    "qwen2_vl": qwen_pixels, "qwen2_5_vl": qwen_pixels, "qwen3_vl": qwen_pixels, "glm4v": qwen_pixels,
    "llava": llava_pixels,
    "llava_next": llava_next_pixels,  # 5-D: base tile, unpadded anyres grid, None for newlines (pixel_readers)
    "internvl": internvl_pixels,
    "paligemma": internvl_pixels,  # also n x n row-major cells of one square input (test_paligemma.py)
    "gemma3": internvl_pixels,  # views (image, crops) of n x n row-major pooled cells (test_gemma3.py)
    "idefics3": idefics3_pixels,  # 5-D pixel_values: tiles then the global frame (pixel_readers)
    "llava_onevision": llava_onevision_pixels,  # like llava_next; refuses a bilinearly shrunk grid
    "phi4_reasoning_vision": naflex_pixels,
    "deepseek_vl2": deepseek_vl2_pixels,  # global view, separator, stitched local tiles (its builder's module)
    "mllama": mllama_pixels,  # cross-attention keys: CLS (None) + patches per tile, padding cut off
    "magma": magma_pixels,  # 5-D crops stitched by the model's own stitch(), None for row separators
}


def check_pixels(name: str, batch, processor, tol: float = 1.0, skip_clipped: bool = False) -> tuple[int, float]:
    """Assert each token's pixels fill its rectangle: along x (and y), the smallest and largest coordinate
    its pixels carry must be the centres of the rectangle's first and last input-pixel column (row),
    within ``tol`` original pixels. Both edges are checked, so a rectangle too large fails like one
    misplaced. Returns (tokens checked, worst edge error). ``skip_clipped``: ignore tokens whose rectangle
    was clipped at padding, where bicubic ringing against the pad colour bends the coordinate ramp.

    An input pixel u of a token spanning [x1, x2) over w input pixels covers [x1 + u s, x1 + (u + 1) s) of
    the original (s = (x2 - x1) / w); a linear ramp resampled there reads its centre, x1 + (u + 1/2) s - 1/2
    (original pixel x holds R = x and is centred at x + 1/2).
    """
    checked, worst = 0, 0.0
    for b in range(batch.batch_size):
        pix = READERS[name](batch, b, processor)
        rects = batch.visual_rects[b]
        areas = (rects[:, 2] - rects[:, 0]) * (rects[:, 3] - rects[:, 1])
        assert len(pix) == len(rects)
        for v, (px, (x1, y1, x2, y2), a) in enumerate(zip(pix, rects.tolist(), areas.tolist())):
            if px is None:  # prefix token (CLS): covers the whole image by construction
                continue
            inside = px[..., 2] >= 254  # [h, w] B marks pixels of the original image (not padding)
            if a == 0:
                assert inside.mean() < 0.1, "token claims no image area but shows image pixels"
                continue
            if skip_clipped and a < 0.99 * float(areas.max()):
                continue
            assert inside.any(), (b, v, "token claims image area but shows only padding")
            h, w = inside.shape
            sx, sy = (x2 - x1) / w, (y2 - y1) / h
            r, g = px[..., 0][inside], px[..., 1][inside]
            errors = [r.min() - (x1 + sx / 2 - 0.5), r.max() - (x2 - sx / 2 - 0.5),
                      g.min() - (y1 + sy / 2 - 0.5), g.max() - (y2 - sy / 2 - 0.5)]
            err = max(abs(e) for e in errors)
            assert err <= tol, ((b, v, (x1, y1, x2, y2)), "x", (r.min(), r.max()), "y", (g.min(), g.max()), errors)
            worst = max(worst, err)
            checked += 1
    return checked, worst
