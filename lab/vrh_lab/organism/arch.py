"""The organism's architecture shapes (vision tower, language model): plain dataclasses, no torch, so that
the build's recipes (:mod:`vrh_lab.organism.pipeline`) and ``vrh organism build --help`` load without it.
:mod:`vrh_lab.organism.model` builds the networks from them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VisionArch:
    patch_size: int = 16
    hidden: int = 128
    layers: int = 3
    heads: int = 4
    intermediate: int = 512
    # Position embeddings start as a smooth 2-D sin/cos code (still learned, still absolute). With CLIP's
    # random std-0.02 init they were ~5% of a patch's content and the LM ignored the image for 450-950
    # steps in three runs (docs/organism.md): a random code averages to noise under diffuse attention,
    # a smooth one averages to a centroid, which gives retrieval a gradient from the start.
    pos_init: str = "sincos"  # or "random"


@dataclass(frozen=True)
class TextArch:
    hidden: int = 128
    layers: int = 4
    heads: int = 8
    intermediate: int = 512
    max_positions: int = 256
    # RoPE base. With head_dim 16 and base 1e4 only ~3 of the 8 rotary frequency pairs turn by less than
    # ~0.5 rad over the ~60 positions between an answer token and the visual tokens, i.e. only ~6 of a
    # head's 16 query/key dims can match *content* (colour, shape) independently of where a patch sits in
    # the sequence. 1e6 (Qwen2.5's base) leaves ~10. (docs/organism.md, v4.)
    rope_theta: float = 10_000.0
