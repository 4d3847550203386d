"""Magma (``microsoft/Magma-8B``, model type ``magma``) rebuilt from native parts, without its remote code.

What the checkpoint is, read from the remote code (github.com/microsoft/Magma @ 1b784e4, ``magma/``), with the vLLM
port (jwyang/vllm ``models/magma.py`` @ 0de453b) and the transformers PR branch (``models/magma``) as second readings.
The hub copy was edited after upload ("remove dependencies on deepspeed and wandb", "remove .transformer" in the tower,
"remove abundant contents" in config.json, the weights index and the modelling file); those edits were not read.

* ``language_model``: ``AutoModelForCausalLM.from_config(text_config)``, a Llama 3 8B: native
  :class:`~transformers.LlamaForCausalLM` (keys ``language_model.model.*``, ``language_model.lm_head.weight``).
* ``vision_tower.clip_vision_model``: open_clip's ``.visual`` of ``laion/CLIP-convnext_xxlarge-laion2B-s34B-b82K-augreg``,
  of which only ``trunk.stem`` and ``trunk.stages`` run (``image_tower_magma.py``, ``extract_features_convnext``): a
  timm ConvNeXt-XXLarge trunk (depths 3-4-30-3, widths 384-768-1536-3072, LayerNorm eps 1e-5, stride 32), returning
  the last stage's map ``(N, 3072, H/32, W/32)``. :class:`ConvNeXtTrunk` is that trunk under timm's module names,
  written here (timm is not a dependency; transformers' ``ConvNextModel`` hard-codes eps 1e-6 in its stem, blocks
  and downsampling layers). The open_clip pooled head (``trunk.head.norm``, ``head.proj``) never runs: the adapter
  drops those keys by name.
* ``multi_modal_projector``: ``proj`` = Linear(3072 -> hidden), GELU, Linear(hidden -> hidden) for ``mlpNx_gelu``;
  ``row_seperator`` (spelled so in the checkpoint) ``[1, 1, hidden]`` appended after every feature row;
  ``img_start_seperator``/``img_end_seperator`` ``[1, hidden]`` exist only under ``mm_use_im_start_end`` and are
  never used by the forward pass.

Token layout (``modeling_magma.py`` forward, "crop" strategy; "global" stitches the pixels and encodes once, same
layout): each crop is encoded alone, the ``g x g`` feature maps (``g = S / 32``) are stitched into one
``(rows * g) x (cols * g)`` grid, a ``row_seperator`` is appended to each row, and the result is read row-major:
``rows * g * (cols * g + 1)`` tokens. Token ``(r, c)`` of the grid is computed from resized pixels
``[32 c, 32 c + 32) x [32 r, 32 r + 32)``. The remote processor leaves one ``<image>`` token that the model expands;
:class:`MagmaProcessor` expands it into that many ``<image>`` tokens instead (as the vLLM port does), so the model
only scatters the features into those positions.

The image processing is :mod:`vrh.models.adapters.magma.processing`.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, LlamaConfig, LlamaForCausalLM, PreTrainedConfig, PreTrainedModel

CONVNEXT_NORM_EPS = 1e-5  # timm convnext_xxlarge: norm_eps=1e-5 on every LayerNorm (stem, blocks, downsampling)
CONVNEXT_STRIDE = 32  # stem 4 x three 2x downsamplings: one feature per 32 x 32 input pixels
BACKBONES = {"convnextxxlarge": ((3, 4, 30, 3), (384, 768, 1536, 3072))}  # vision_backbone -> (depths, widths)


# --- config ----------------------------------------------------------------------------------------

class MagmaConfig(PreTrainedConfig):
    """The checkpoint's ``config.json``: ``text_config`` (a Llama config), ``vision_config`` (a plain dict, read
    with ``[]`` as the remote code does) and ``image_token_index``. As the remote ``MagmaConfig`` does, the text
    config's fields are also copied to the top level (that is how the published file carries them)."""

    model_type = "magma"
    sub_configs_defaults = {"text_config": LlamaConfig}
    attribute_map = {"image_token_id": "image_token_index"}

    vision_config: dict | None = None
    text_config: dict | PreTrainedConfig | None = None
    image_token_index: int = 128257
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.vision_config = dict(self.vision_config or {})
        for key, value in self.text_config.to_dict().items():  # the remote config's top-level copies
            if not key.startswith("_") and key not in ("model_type", "architectures", "transformers_version",
                                                       "dtype", "torch_dtype") and not hasattr(type(self), key):
                setattr(self, key, value)


def magma_config(raw: dict[str, Any]) -> MagmaConfig:
    """A :class:`MagmaConfig` from the raw ``config.json``. Without a ``text_config`` object the Llama fields are
    read from the top level (where the remote config copies them)."""
    raw = {k: v for k, v in raw.items() if k not in ("auto_map", "architectures", "model_type")}
    attn = raw.pop("_attn_implementation", None)
    text = raw.pop("text_config", None)
    if text is None:
        text = {k: v for k, v in raw.items() if k in LlamaConfig.__dataclass_fields__ or k in ("rope_theta", "rope_scaling")}
    text = {k: v for k, v in text.items() if k not in ("auto_map", "architectures", "_name_or_path")}
    text["model_type"] = "llama"
    vision = raw.pop("vision_config", None)
    if not isinstance(vision, dict):
        raise ValueError("Magma config.json has no vision_config object")
    config = MagmaConfig(text_config=text, vision_config=vision,
                         image_token_index=int(raw.get("image_token_index", 128257)))
    if "mm_use_image_start_end" in raw:  # top-level flag Magma's lmms-eval wrapper reads for the prompt's image tags
        config.mm_use_image_start_end = bool(raw["mm_use_image_start_end"])
    if attn is not None:
        config._attn_implementation = attn
    return config


def convnext_shape(vision: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(depths, widths) of the ConvNeXt trunk. ``vision_backbone`` names it (only ``convnextxxlarge``, Magma-8B's, is
    known); ``convnext_depths`` / ``convnext_widths`` (vrh keys, in tiny test builds only) override it."""
    name = vision.get("vision_backbone", "convnextxxlarge")
    if name not in BACKBONES and "convnext_widths" not in vision:
        raise ValueError(f"vision_backbone {name!r}: vrh knows only {sorted(BACKBONES)} (Magma-8B's)")
    depths, widths = BACKBONES.get(name, ((), ()))
    depths = tuple(int(v) for v in vision.get("convnext_depths", depths))
    widths = tuple(int(v) for v in vision.get("convnext_widths", widths))
    if len(depths) != 4 or len(widths) != 4:
        raise ValueError(f"a ConvNeXt trunk has 4 stages; got depths {depths}, widths {widths}")
    return depths, widths


# --- vision tower: timm's ConvNeXt trunk under timm's names ---------------------------------------------

class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of a ``(B, C, H, W)`` map (timm ``LayerNorm2d``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)  # (B, H, W, C)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)  # (B, C, H, W)


class ConvNeXtMlp(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7 conv, channels-last LayerNorm, MLP, layer scale ``gamma``, residual (timm, ``conv_mlp=False``)."""

    def __init__(self, dim: int):
        super().__init__()
        self.conv_dw = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=CONVNEXT_NORM_EPS)
        self.mlp = ConvNeXtMlp(dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))  # timm ls_init_value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv_dw(x).permute(0, 2, 3, 1)  # (B, H, W, C)
        y = self.mlp(self.norm(y)).permute(0, 3, 1, 2)  # (B, C, H, W)
        return x + y * self.gamma.view(1, -1, 1, 1)


class ConvNeXtStage(nn.Module):
    def __init__(self, in_dim: int, dim: int, depth: int, downsample: bool):
        super().__init__()
        self.downsample = (nn.Sequential(LayerNorm2d(in_dim, eps=CONVNEXT_NORM_EPS),
                                         nn.Conv2d(in_dim, dim, kernel_size=2, stride=2))
                           if downsample else nn.Identity())
        self.blocks = nn.Sequential(*[ConvNeXtBlock(dim) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.downsample(x))


class ConvNeXtTrunk(nn.Module):
    """timm ``ConvNeXt`` stem + stages (patch stem 4x4, stage 0 without downsampling), no head."""

    def __init__(self, depths: tuple[int, ...], widths: tuple[int, ...]):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], kernel_size=4, stride=4),
                                  LayerNorm2d(widths[0], eps=CONVNEXT_NORM_EPS))
        ins = (widths[0], *widths[:-1])
        self.stages = nn.Sequential(*[ConvNeXtStage(i, w, d, downsample=s > 0)
                                      for s, (i, w, d) in enumerate(zip(ins, widths, depths, strict=True))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))  # (B, C_last, H/32, W/32)


class ClipVisual(nn.Module):
    """open_clip's ``TimmModel`` as Magma keeps it: only its ``trunk`` (the pooled head is not built)."""

    def __init__(self, depths: tuple[int, ...], widths: tuple[int, ...]):
        super().__init__()
        self.trunk = ConvNeXtTrunk(depths, widths)


class MagmaVisionTower(nn.Module):
    def __init__(self, vision: dict[str, Any]):
        super().__init__()
        self.clip_vision_model = ClipVisual(*convnext_shape(vision))

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.clip_vision_model.trunk(pixel_values)  # (N, C, H/32, W/32)


# --- projector and the token layout -------------------------------------------------------------------

class MagmaProjector(nn.Module):
    def __init__(self, vision: dict[str, Any], hidden: int):
        super().__init__()
        kind = vision.get("mm_projector_type", "mlp2x_gelu")
        found = re.fullmatch(r"mlp(\d+)x_gelu(_segtokv\d+)?", kind)
        if not found:
            raise ValueError(f"mm_projector_type {kind!r}: vrh builds mlpNx_gelu projectors only")
        width = int(vision.get("mm_hidden_size", convnext_shape(vision)[1][-1]))
        layers: list[nn.Module] = [nn.Linear(width, hidden)]
        for _ in range(1, int(found.group(1))):
            layers += [nn.GELU(), nn.Linear(hidden, hidden)]
        self.proj = nn.Sequential(*layers)
        if vision.get("mm_use_row_seperator", True):
            self.row_seperator = nn.Parameter(torch.zeros(1, 1, hidden))
        if vision.get("mm_use_im_start_end", False):  # in the checkpoint, unused by the forward pass
            self.img_start_seperator = nn.Parameter(torch.zeros(1, hidden))
            self.img_end_seperator = nn.Parameter(torch.zeros(1, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def stitch(features: torch.Tensor, rows: int, cols: int, separator: torch.Tensor | None) -> torch.Tensor:
    """One image's crop features ``[rows * cols, g, g, D]`` (crops row-major) -> its token sequence
    ``[rows * g * (cols * g + 1), D]``: the crops stitched into one grid, ``separator`` ``[D]`` after each row
    (none when None), read row-major. The model's own layout; the pixel-content test reads the map through it."""
    n, gh, gw, d = features.shape
    grid = features.view(rows, cols, gh, gw, d).permute(0, 2, 1, 3, 4)  # (rows, g, cols, g, D)
    grid = grid.reshape(rows * gh, cols * gw, d)  # (R, C, D)
    if separator is not None:
        grid = torch.cat([grid, separator.view(1, 1, d).expand(rows * gh, 1, d).to(grid.dtype)], dim=1)  # (R, C+1, D)
    return grid.reshape(-1, d)


class MagmaForCausalLM(PreTrainedModel, GenerationMixin):
    """Magma-8B under its published module names, built from native parts (see the module docstring)."""

    config_class = MagmaConfig
    base_model_prefix = ""
    _no_split_modules = ["LlamaDecoderLayer", "ConvNeXtStage"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True

    def __init__(self, config: MagmaConfig):
        super().__init__(config)
        self.vision_tower = MagmaVisionTower(config.vision_config)
        self.multi_modal_projector = MagmaProjector(config.vision_config, config.text_config.hidden_size)
        self.language_model = LlamaForCausalLM(config.text_config)
        self.strategy = config.vision_config.get("img_anyres_strategy", "crop")
        if self.strategy not in ("crop", "global"):
            raise ValueError(f"img_anyres_strategy {self.strategy!r}: Magma's code knows 'crop' and 'global'")
        layer = config.vision_config.get("vision_feature_layer", "clip_vis_dense")
        if layer != "clip_vis_dense":
            raise ValueError(f"vision_feature_layer {layer!r}: the tower returns only 'clip_vis_dense'")
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, ConvNeXtBlock):
            nn.init.constant_(module.gamma, 1e-6)
        elif isinstance(module, MagmaProjector):
            for name, p in module.named_parameters(recurse=False):  # the separators
                nn.init.normal_(p, std=0.02)

    def get_input_embeddings(self) -> nn.Module:
        return self.language_model.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module:
        return self.language_model.get_output_embeddings()

    def image_features(self, pixel_values: torch.Tensor, image_sizes: torch.Tensor) -> torch.Tensor:
        """``pixel_values`` [B, N_max, 3, S, S] (crops row-major, zero-padded), ``image_sizes`` [B, 2] (rows, cols)
        -> every image's tokens, concatenated in batch order: [sum_b R_b * (C_b + 1), hidden]."""
        sep = getattr(self.multi_modal_projector, "row_seperator", None)
        dtype = self.multi_modal_projector.proj[0].weight.dtype
        out = []
        for pv, (rows, cols) in zip(pixel_values, image_sizes.tolist(), strict=True):
            crops = pv[:rows * cols].to(dtype)  # (rows*cols, 3, S, S)
            if self.strategy == "global":  # stitch the pixels, encode once, cut the map back into crops
                s = crops.shape[-1]
                whole = crops.view(rows, cols, 3, s, s).permute(2, 0, 3, 1, 4).reshape(1, 3, rows * s, cols * s)
                fmap = self.vision_tower(whole)  # (1, D, rows*g, cols*g)
                g = fmap.shape[-1] // cols
                fmap = fmap.view(-1, rows, g, cols, g).permute(1, 3, 0, 2, 4).reshape(rows * cols, -1, g, g)
            else:
                fmap = self.vision_tower(crops)  # (rows*cols, D, g, g)
            feats = self.multi_modal_projector(fmap.permute(0, 2, 3, 1))  # (rows*cols, g, g, hidden)
            out.append(stitch(feats, rows, cols, None if sep is None else sep.view(-1)))
        return torch.cat(out)

    def forward(self, input_ids: torch.Tensor | None = None, pixel_values: torch.Tensor | None = None,
                image_sizes: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None, **kwargs: Any):
        if inputs_embeds is None:
            is_image = input_ids == self.config.image_token_index  # [B, S]
            # the image id may lie past the embedding table (the remote code embeds it as id 0)
            inputs_embeds = self.get_input_embeddings()(input_ids.masked_fill(is_image, 0))
            if pixel_values is not None:
                feats = self.image_features(pixel_values, image_sizes)  # [N_tokens, hidden]
                if int(is_image.sum()) != feats.shape[0]:
                    raise ValueError(f"{int(is_image.sum())} image tokens in input_ids but the images give "
                                     f"{feats.shape[0]} features")
                inputs_embeds = inputs_embeds.masked_scatter(is_image.unsqueeze(-1), feats.to(inputs_embeds.dtype))
        return self.language_model(inputs_embeds=inputs_embeds, attention_mask=attention_mask, **kwargs)
