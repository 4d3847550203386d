"""Pixel readers of the shared adapter suite's pixel-content test (:mod:`.pixels`) that need more than a few
lines, and the model-side helpers they use (``token_sources``, ``packed_sources``: what the family's own
``pack_image_features`` does, independent of the adapter). Test-only: nothing in the library calls them."""

from __future__ import annotations

import torch


def idefics3_pixels(batch, b: int, processor) -> list:
    """Per visual token of sample ``b``: the ``[F/n, F/n, C]`` frame pixels it is computed from, in 0-255
    (normalisation undone). ``pixel_values`` is ``[B, N_max, C, F, F]``: the sample's frames in order (tiles
    row-major, then the global frame), zero frames padding the batch; a frame gives ``image_seq_len = n x n``
    tokens, token k its ``(k // n, k % n)`` cell (the ViT's row-major patches, merged s x s row-major by the
    connector's pixel shuffle: test_idefics3.py proves the order through the model). The reader the shared
    adapter suite's pixel-content test (:mod:`.pixels`) uses for Idefics3 / SmolVLM."""
    import math

    import numpy as np

    ip = processor.image_processor
    per_frame = int(processor.image_seq_len)
    n = math.isqrt(per_frame)
    n_frames = len(batch.visual_positions[b]) // per_frame
    mean, std = np.asarray(ip.image_mean, dtype=np.float64), np.asarray(ip.image_std, dtype=np.float64)
    frames = batch.inputs["pixel_values"][b, :n_frames].double().numpy().transpose(0, 2, 3, 1)  # [N, F, F, C]
    frames = (frames * std + mean) * 255
    cell = frames.shape[1] // n
    return [frame[i * cell:(i + 1) * cell, j * cell:(j + 1) * cell] for frame in frames
            for i, j in (divmod(k, n) for k in range(per_frame))]


def token_sources(processor, image_hw: tuple[int, int]) -> list[tuple[int, int, int] | None]:
    """Per LM visual token of one image, in sequence order, the ``(tile, patch_row, patch_col)`` of
    ``pixel_values[b]`` it is computed from, or None for a newline token: read off the model's own
    ``pack_image_features`` run on features that carry their (tile, patch) index. Independent of the adapter,
    so the pixel-content test checks the adapter against what the model really does."""
    from types import SimpleNamespace

    from transformers.models.llava_next.modeling_llava_next import LlavaNextModel, image_size_to_num_patches

    tile, patch = int(processor.image_processor.crop_size["height"]), int(processor.patch_size)
    pinpoints = processor.image_processor.image_grid_pinpoints
    g = tile // patch
    cfg = SimpleNamespace(vision_config=SimpleNamespace(image_size=tile, patch_size=patch),
                          image_grid_pinpoints=pinpoints)
    n_tiles = image_size_to_num_patches(list(image_hw), pinpoints, tile)
    t, q = torch.meshgrid(torch.arange(n_tiles), torch.arange(g * g), indexing="ij")  # [N, g*g] each
    feats = torch.stack([t, q], dim=-1).float()  # [N, g*g, 2]: each feature says where it came from
    packed, _ = LlavaNextModel.pack_image_features(SimpleNamespace(config=cfg), [feats], torch.tensor([image_hw]),
                                                   "default", image_newline=torch.tensor([-1.0, -1.0]))
    return [None if tq[0] < 0 else (int(tq[0]), int(tq[1]) // g, int(tq[1]) % g) for tq in packed[0].tolist()]


def llava_next_pixels(batch, b: int, processor) -> list:
    """Per visual token of sample ``b``: the ``[P, P, C]`` input pixels it is computed from, in 0-255
    (normalisation undone), or None for a newline token (it shows no pixels). The reader the shared adapter
    suite's pixel-content test (:mod:`.pixels`) uses for LLaVA-NeXT's 5-D ``pixel_values``."""
    import numpy as np

    ip, p = processor.image_processor, int(processor.patch_size)
    mean, std = np.asarray(ip.image_mean, dtype=np.float64), np.asarray(ip.image_std, dtype=np.float64)
    pv = (batch.inputs["pixel_values"][b].double().numpy().transpose(0, 2, 3, 1) * std + mean) * 255  # [N, S, S, C]
    sources = token_sources(processor, tuple(int(v) for v in batch.inputs["image_sizes"][b]))
    return [None if s is None else pv[s[0], s[1] * p:(s[1] + 1) * p, s[2] * p:(s[2] + 1) * p] for s in sources]


def packed_sources(processor, image_hw: tuple[int, int], features: torch.Tensor) -> torch.Tensor:
    """The model's own ``pack_image_features`` (base tile, unpad, bilinear shrink, newlines) applied to
    per-patch ``features`` ``[N, g*g, D]`` (N tiles of ``pixel_values``, base first), with newlines marked by a
    row of -1: ``[V, D]`` in LM sequence order. Independent of the adapter, so tests check the adapter against
    what the model really does."""
    from types import SimpleNamespace

    from transformers.models.llava_onevision.modeling_llava_onevision import LlavaOnevisionModel

    tile = int(processor.image_processor.size["height"])
    g = int(round(features.shape[1] ** 0.5))
    cfg = SimpleNamespace(vision_config=SimpleNamespace(image_size=tile, patch_size=tile // g),
                          image_grid_pinpoints=processor.image_processor.image_grid_pinpoints)
    packed, _ = LlavaOnevisionModel.pack_image_features(
        SimpleNamespace(config=cfg), [features], torch.tensor([image_hw]),
        image_newline=torch.full((features.shape[-1],), -1.0, dtype=features.dtype),
        vision_aspect_ratio=processor.vision_aspect_ratio)
    return packed[0]


def llava_onevision_pixels(batch, b: int, processor) -> list:
    """Per visual token of sample ``b``: the ``[P, P, C]`` input pixels it is computed from, in 0-255
    (normalisation undone), or None for a newline token (it shows no pixels). A grid the model shrinks
    bilinearly has no such patch per token (each blends up to 2 x 2 patches): this reader refuses it, and
    test_llava_onevision.py proves that layout by the blended patch centres instead. The reader the shared
    adapter suite's pixel-content test (:mod:`.pixels`) uses for LLaVA-OneVision."""
    import numpy as np

    ip = processor.image_processor
    g = int(round(int(processor.num_image_tokens) ** 0.5))
    hw = tuple(int(v) for v in batch.inputs["image_sizes"][b])
    from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

    n_tiles = image_size_to_num_patches(list(hw), ip.image_grid_pinpoints, int(ip.size["height"]))
    t, q = torch.meshgrid(torch.arange(n_tiles), torch.arange(g * g), indexing="ij")  # [N, g*g] each
    src = packed_sources(processor, hw, torch.stack([t, q], dim=-1).double())  # [V, 2] (tile, patch) or -1
    if not torch.equal(src, src.round()):
        raise ValueError("the model shrinks this image's grid bilinearly: its tokens are blends of patches")
    p = int(ip.size["height"]) // g
    mean, std = np.asarray(ip.image_mean, dtype=np.float64), np.asarray(ip.image_std, dtype=np.float64)
    pv = (batch.inputs["pixel_values"][b].double().numpy().transpose(0, 2, 3, 1) * std + mean) * 255  # [N, S, S, C]
    out = []
    for tile, patch in src.long().tolist():
        r, c = divmod(patch, g)
        out.append(None if tile < 0 else pv[tile, r * p:(r + 1) * p, c * p:(c + 1) * p])
    return out


def mllama_pixels(batch, b: int, processor) -> list:
    """Per cross-attention key of sample ``b``: the ``[P', P', C]`` pixels it is computed from, in 0-255
    (normalisation undone), or None for a tile's CLS (it pools the whole tile). ``pixel_values`` is
    ``[B, images, tiles, C, T, T]``; key ``(image * tiles + t) * (n * n + 1) + p`` is patch ``p - 1`` of tile t,
    row-major ``((p - 1) // n, (p - 1) % n)`` of ``T / n`` pixels (the tower's conv patches, CLS prepended:
    test_mllama.py proves the order through the model). The processor pads the resized image with zeros at the
    bottom and right, so rows and columns that are zero in every channel are cut off a patch: what is left is
    the part of the patch holding image pixels (a patch of padding only, or a padded tile, is kept whole). The
    reader the shared adapter suite's pixel-content test (:mod:`.pixels`) uses for mllama."""
    import numpy as np

    ip = processor.image_processor
    patch = int(processor.patch_size)
    mean, std = np.asarray(ip.image_mean, dtype=np.float64), np.asarray(ip.image_std, dtype=np.float64)
    pv = batch.inputs["pixel_values"][b].double().numpy()  # [images, tiles, C, T, T]
    tiles = pv.reshape(-1, *pv.shape[2:]).transpose(0, 2, 3, 1)  # [images * tiles, T, T, C]
    tiles = (tiles * std + mean) * 255
    n = tiles.shape[1] // patch
    out: list = []
    for tile in tiles:
        out.append(None)  # the CLS
        for k in range(n * n):
            i, j = divmod(k, n)
            px = tile[i * patch:(i + 1) * patch, j * patch:(j + 1) * patch]  # [P, P, C]
            image = np.abs(px).max(-1) > 0.5  # [P, P] not the processor's zero padding
            rows, cols = image.any(1), image.any(0)
            if rows.any():
                px = px[: int(np.nonzero(rows)[0].max()) + 1, : int(np.nonzero(cols)[0].max()) + 1]
            out.append(px)
    return out
