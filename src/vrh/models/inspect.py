"""Look at a checkpoint without loading its weights: what a user checks before spending a GPU hour.

:func:`inspect_checkpoint` builds the model from its config on the ``meta`` device (parameters with shapes and
no storage: nothing read, nothing allocated) through the adapter its ``config.model_type`` picks, and reads
from it what vrh will use: the language model's layers x heads (the denominator of every sparsity ratio),
the head dim (``o_proj``'s input viewed as ``[B, S, H, d_head]`` by the masking hook, checked here), the
attention modules the adapter finds, and, for an image size, how many visual tokens the checkpoint's own
processor makes of such an image and how many of them are *cells* (tokens that show image pixels and may
enter K; :class:`vrh.models.adapters.base.VisionBatch`). The count goes through the adapter's
``build_batch`` on a blank image, so it is the one a run gets, never a formula.

A checkpoint is a local folder, the shipped ``organism``, or a hub id already in the local Hugging Face cache:
nothing is downloaded (an uncached id is one line saying so).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# files any of which makes a folder carry a tokenizer (the processor needs one to expand the image placeholder)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "qwen.tiktoken", "tokenizer.tiktoken")


@dataclass(frozen=True)
class VisualCount:
    """Visual tokens the processor makes of one ``width x height`` image (``tokens`` None: not counted, ``note``
    says why in one line)."""

    width: int
    height: int
    tokens: int | None = None
    cells: int | None = None
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # the adapter's per-sample meta (token grid, tiles, ...)


@dataclass(frozen=True)
class Inspection:
    checkpoint: str  # what the user named
    path: str  # the local folder it resolved to
    model_type: str
    adapter: str
    model_class: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    o_proj_in_features: int
    attention_modules: list[str]  # module path per layer, index = vrh layer index
    attention_classes: list[str]  # class name per layer
    parameters: int  # counted on the meta build
    visual: list[VisualCount] = field(default_factory=list)

    @property
    def total_heads(self) -> int:
        return self.num_layers * self.num_heads

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "total_heads": self.total_heads}

    def format(self) -> str:
        """The human listing, one fact per line."""
        params = f"{self.parameters / 1e9:.2f} B" if self.parameters >= 1e8 else f"{self.parameters:,}"
        rows = [("checkpoint", self.checkpoint + (f" ({self.path})" if self.path != self.checkpoint else "")),
                ("family", f"{self.adapter} (model type {self.model_type}; {self.model_class} built on the meta "
                           "device, no weights read)"),
                ("LM heads", f"{self.num_layers} layers x {self.num_heads} heads = {self.total_heads:,} "
                             f"({self.num_kv_heads} KV heads per layer)"),
                ("head dim", f"{self.head_dim} (o_proj input {self.o_proj_in_features:,} = {self.num_heads} x "
                             f"{self.head_dim})"),
                ("attention", f"{_module_pattern(self.attention_modules)}: "
                              f"{', '.join(sorted(set(self.attention_classes)))}"),
                ("parameters", params)]
        for v in self.visual:
            rows.append((f"image {v.width}x{v.height}",
                         f"{v.tokens:,} visual tokens, {v.cells:,} of them cells" if v.tokens is not None
                         else f"visual tokens not counted: {v.note}"))
        width = max(len(label) for label, _ in rows) + 2
        return "\n".join(f"{label:<{width}}{text}" for label, text in rows)


def parse_image_size(text: str) -> tuple[int, int]:
    """``"WxH"`` -> ``(width, height)``.

    >>> parse_image_size("1792x1344")
    (1792, 1344)
    """
    w, sep, h = text.lower().partition("x")
    if not (sep and w.strip().isdigit() and h.strip().isdigit() and int(w) > 0 and int(h) > 0):
        raise ValueError(f"--image-size {text!r}: expected WIDTHxHEIGHT in pixels, e.g. 1792x1344")
    return int(w), int(h)


def resolve_local(checkpoint: str, revision: str | None = None) -> Path:
    """The local folder of ``checkpoint``: a folder, the shipped ``organism``, or a hub id's snapshot in the
    local Hugging Face cache (never downloaded)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    from vrh.models.loading import resolve_model_path

    path = Path(resolve_model_path(checkpoint)).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} has no config.json; inspect builds the model from it")
        return path
    if path.exists():
        raise FileNotFoundError(f"{path} is a file, not a checkpoint folder")
    if checkpoint.startswith(("/", "./", "../", "~")):
        raise FileNotFoundError(f"model folder {path} does not exist")
    try:
        return Path(snapshot_download(checkpoint, revision=revision, local_files_only=True))
    except HFValidationError:
        raise FileNotFoundError(f"{checkpoint!r} is neither an existing folder nor a valid hub id (org/name)"
                                ) from None
    except LocalEntryNotFoundError:
        at = f"@{revision}" if revision else ""
        raise FileNotFoundError(f"{checkpoint}{at} is not in the local Hugging Face cache and inspect does not "
                                f"download; fetch all but its weights first (`hf download {checkpoint} --exclude "
                                "'*.safetensors' '*.bin'`) or pass a local folder"
                                ) from None


def inspect_checkpoint(checkpoint: str, *, image_sizes: tuple[tuple[int, int], ...] = (),
                       adapter: str | None = None, revision: str | None = None) -> Inspection:
    """Build ``checkpoint`` on the meta device and read its structure; count visual tokens per image size.

    Raises ValueError / FileNotFoundError (one line) for a refused family, an unknown model type or a checkpoint
    that is not local; a processor that cannot count is reported in that size's ``note`` instead."""
    import importlib

    import torch
    from transformers import AutoConfig, PretrainedConfig

    from vrh.models.adapters import get_adapter

    path = resolve_local(checkpoint, revision)
    raw, _ = PretrainedConfig.get_config_dict(str(path))
    chosen = get_adapter(raw.get("model_type", ""), adapter=adapter)  # refuses remote-code families first
    if not chosen.model_class:
        raise ValueError(f"adapter {type(chosen).__name__} names no model_class; inspect cannot build the model")
    config = AutoConfig.from_pretrained(str(path))
    cls = getattr(importlib.import_module("transformers"), chosen.model_class)
    with torch.device("meta"):  # parameters get shapes and no storage
        model = cls._from_config(config)
    names = {id(m): n for n, m in model.named_modules()}
    layers = range(chosen.num_layers(model))
    attn = [chosen.attention_module(model, layer) for layer in layers]
    heads, head_dim = chosen.num_heads(model), chosen.head_dim(model)
    o_in = {chosen.o_proj(model, layer).in_features for layer in layers}
    if o_in != {heads * head_dim}:  # the masking hook views o_proj's input as [B, S, heads, head_dim]
        raise ValueError(f"o_proj input features {sorted(o_in)} != {heads} heads x {head_dim} head dim: vrh "
                         "cannot split this model's o_proj input into heads")
    text = chosen.text_config(model)
    visual = count_visual_tokens(chosen, model, path, tuple(image_sizes))
    return Inspection(checkpoint=checkpoint, path=str(path), model_type=config.model_type, adapter=chosen.name,
                      model_class=chosen.model_class, num_layers=len(layers), num_heads=heads,
                      num_kv_heads=int(getattr(text, "num_key_value_heads", None) or heads), head_dim=head_dim,
                      o_proj_in_features=o_in.pop(), attention_modules=[names[id(a)] for a in attn],
                      attention_classes=[type(a).__name__ for a in attn],
                      parameters=sum(p.numel() for p in model.parameters()), visual=visual)


def count_visual_tokens(chosen: Any, model: Any, path: Path, sizes: tuple[tuple[int, int], ...]
                        ) -> list[VisualCount]:
    """The visual tokens and cells of a blank image of each size, through the checkpoint's processor and the
    adapter's ``build_batch`` (``on_load`` first: it completes processor settings from the config). A
    processor that cannot count gives every size the same one-line ``note``."""
    from PIL import Image

    def fail(note: str) -> list[VisualCount]:
        return [VisualCount(w, h, note=note) for w, h in sizes]

    if not sizes:
        return []
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        return fail(f"{path} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}); the processor needs them "
                    "to expand the image placeholder")
    plain = lambda o: o.tolist() if hasattr(o, "tolist") else str(o)  # noqa: E731 - tensors, arrays -> lists
    counts = []
    try:
        processor = chosen.processor_for(str(path))
        processor.tokenizer.padding_side = "left"
        chosen.on_load(model, processor)
        for width, height in sizes:
            batch = chosen.build_batch(processor, [Image.new("RGB", (width, height))],
                                       [chosen.grounding_prompt("it")])
            meta = json.loads(json.dumps(batch.meta[0], default=plain)) if batch.meta else {}  # JSON-ready
            counts.append(VisualCount(width, height, tokens=len(batch.visual_positions[0]),
                                      cells=int(batch.cell_tokens[0].sum()), meta=meta))
    except (OSError, ValueError, TypeError, AttributeError, ImportError, KeyError, NotImplementedError) as e:
        detail = " ".join(str(e).split())[:300]  # one line
        return fail(f"the processor in {path} could not expand an image ({type(e).__name__}: {detail})")
    return counts


def _module_pattern(names: list[str]) -> str:
    """``model.layers.0.self_attn`` ... ``model.layers.27.self_attn`` -> ``model.layers.{0..27}.self_attn``
    when the names differ only in a consecutive layer index; else the first and the last."""
    if not names:
        return "(none)"
    expected = [names[0].replace(".0.", ".{i}.", 1).replace("{i}", str(i)) for i in range(len(names))]
    if ".0." in names[0] and names == expected:
        return names[0].replace(".0.", f".{{0..{len(names) - 1}}}.", 1)
    return names[0] if len(names) == 1 else f"{names[0]} ... {names[-1]} ({len(names)} modules)"
