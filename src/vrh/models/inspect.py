"""Look at a checkpoint without loading its weights: what a user checks before spending a GPU hour.

:func:`inspect_checkpoint` builds the model from its config on the ``meta`` device (parameters with shapes and
no storage: nothing read, nothing allocated) through the adapter its ``config.model_type`` picks, and reads
from it what vrh will use: the language model's layers x heads (the denominator of every sparsity ratio),
the head dim (``o_proj``'s input viewed as ``[B, S, H, d_head]`` by the masking hook, checked here), the
attention modules the adapter finds, and, for an image size, how many visual tokens the checkpoint's own
processor makes of such an image and how many of them are *cells* (tokens that show image pixels and may
enter K; :class:`vrh.models.adapters.base.VisionBatch`). The count goes through the adapter's
``build_batch`` on a blank image, so it is the one a run gets, never a formula. A checkpoint without tokenizer
files (a config-only download) is counted with a stand-in tokenizer carrying the family's special tokens when the
caller passes one (``vrh models --inspect`` passes the tiny builds' tokenizers, :mod:`vrh.testing.builders`): the
expansion of the image placeholder is set by the processor configs and those special tokens, not by the vocabulary.

A checkpoint is a local folder, the shipped ``organism``, or a hub id already in the local Hugging Face cache:
nothing is downloaded (an uncached id is one line saying so).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vrh.models.checkpoint_files import PROCESSOR_CONFIG_FILES, TOKENIZER_FILES, needs_processor_config

# a checkpoint's files that describe a tokenizer whose vocabulary it lacks: a stand-in's own replace them
TOKENIZER_DEFINITIONS = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
STAND_IN_NOTE = ("counted with a stand-in tokenizer: the checkpoint has no tokenizer files; the count does not depend "
                 "on the vocabulary")


@dataclass(frozen=True)
class VisualCount:
    """Visual tokens the processor makes of one ``width x height`` image (``tokens`` None: not counted, ``note``
    says why in one line; counted, ``note`` is empty or :data:`STAND_IN_NOTE`)."""

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
    # layers whose attention is a cross-attention over the vision states (Llama 3.2 Vision): only their heads
    # read the image, and the visual tokens counted are their keys
    cross_attention_layers: list[int] = field(default_factory=list)

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
        if self.cross_attention_layers:
            n = len(self.cross_attention_layers)
            rows.insert(4, ("cross-attention", f"layers {', '.join(map(str, self.cross_attention_layers))}: {n} x "
                                               f"{self.num_heads} = {n * self.num_heads:,} heads read the image; the "
                                               "visual tokens are their keys, not text positions"))
        for v in self.visual:
            rows.append((f"image {v.width}x{v.height}",
                         f"{v.tokens:,} visual tokens, {v.cells:,} of them cells" + (f" ({v.note})" if v.note else "")
                         if v.tokens is not None else f"visual tokens not counted: {v.note}"))
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

    path = Path(resolve_model_path(checkpoint, materialize=False)).expanduser()
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
                       adapter: str | None = None, revision: str | None = None,
                       stand_in: Callable[[str], Any] | None = None) -> Inspection:
    """Build ``checkpoint`` on the meta device and read its structure; count visual tokens per image size.

    ``stand_in``: adapter name -> a tokenizer with that family's special tokens (or None: no stand-in), used to
    count a checkpoint that has no tokenizer files. Raises ValueError / FileNotFoundError (one line) for a refused
    family, an unknown model type or a checkpoint that is not local; a processor that cannot count is reported in
    that size's ``note`` instead."""
    import importlib

    import torch
    from transformers import AutoConfig

    from vrh.models.adapters import get_adapter
    from vrh.models import preflight
    from vrh.models.adapters.composed_base import ComposedAdapter

    path = resolve_local(checkpoint, revision)
    raw = preflight.read_config(str(path))
    chosen = get_adapter(raw.get("model_type", ""), adapter=adapter)  # refuses remote-code families first
    if not getattr(chosen, "runs_remote_code", False):  # a custom adapter's explicit opt-in (docs/adapters.md)
        preflight.refuse_remote_code(str(path), ported=getattr(chosen, "ported_remote_code", ()))
    if isinstance(chosen, ComposedAdapter):  # a family transformers has no class for: vrh builds its modules
        with torch.device("meta"):
            model = chosen.build_model(raw)
    else:
        if not chosen.model_class:
            raise ValueError(f"adapter {type(chosen).__name__} names no model_class; inspect cannot build the model")
        config = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
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
    visual = count_visual_tokens(chosen, model, path, tuple(image_sizes), stand_in)
    return Inspection(checkpoint=checkpoint, path=str(path), model_type=raw.get("model_type", ""),
                      adapter=chosen.name, model_class=chosen.model_class or type(model).__name__, num_layers=len(layers), num_heads=heads,
                      num_kv_heads=int(getattr(text, "num_key_value_heads", None) or heads), head_dim=head_dim,
                      o_proj_in_features=o_in.pop(), attention_modules=[names[id(a)] for a in attn],
                      attention_classes=[type(a).__name__ for a in attn],
                      parameters=sum(p.numel() for p in model.parameters()), visual=visual,
                      cross_attention_layers=list(chosen.cross_attention_layers(model)))


def count_visual_tokens(chosen: Any, model: Any, path: Path, sizes: tuple[tuple[int, int], ...],
                        stand_in: Callable[[str], Any] | None = None) -> list[VisualCount]:
    """The visual tokens and cells of a blank image of each size, through the checkpoint's processor and the
    adapter's ``build_batch`` (``on_load`` first: it completes processor settings from the config). A checkpoint
    without tokenizer files is counted with ``stand_in(chosen.name)`` where that gives a tokenizer
    (:func:`stand_in_view`; each count's ``note`` says so). A processor that cannot count gives every size the
    same one-line ``note``."""
    if not sizes:
        return []
    if needs_processor_config(chosen) and not any((path / f).is_file() for f in PROCESSOR_CONFIG_FILES):
        why = (f"{path} has no processor config ({' or '.join(PROCESSOR_CONFIG_FILES)}), which sets how an image "
               "becomes visual tokens: download it too (all but the weights) or save it there with "
               "processor.save_pretrained(FOLDER)")
        return [VisualCount(w, h, note=why) for w, h in sizes]
    if any((path / f).is_file() for f in TOKENIZER_FILES):
        return _count(chosen, model, path, path, sizes, note="")
    tokenizer = stand_in(chosen.name) if stand_in is not None else None
    if tokenizer is None:
        why = (f"{path} has no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}); the processor needs them to "
               "expand the image placeholder")
        if stand_in is not None:
            why += f", and family {chosen.name!r} has no stand-in tokenizer (no tiny build)"
        return [VisualCount(w, h, note=why) for w, h in sizes]
    with stand_in_view(path, tokenizer) as view:
        return _count(chosen, model, path, view, sizes, note=STAND_IN_NOTE)


@contextlib.contextmanager
def stand_in_view(path: Path, tokenizer: Any) -> Iterator[Path]:
    """A temporary folder that loads as ``path`` with ``tokenizer``: the tokenizer saved, then links to the
    checkpoint's files (its processor configs and chat template win over the stand-in's; its
    :data:`TOKENIZER_DEFINITIONS`, which describe the vocabulary it lacks, do not). ``path`` is not touched."""
    with tempfile.TemporaryDirectory(prefix="vrh-stand-in-") as tmp:
        view = Path(tmp)
        tokenizer.save_pretrained(view)
        own = [f for f in sorted(path.iterdir()) if f.is_file() and f.name not in TOKENIZER_DEFINITIONS]
        if any(f.name.startswith("chat_template") for f in own):  # the checkpoint's template, never both
            for f in view.glob("chat_template*"):
                f.unlink()
        for f in own:
            (view / f.name).unlink(missing_ok=True)
            (view / f.name).symlink_to(f.resolve())
        yield view


def _count(chosen: Any, model: Any, path: Path, source: Path, sizes: tuple[tuple[int, int], ...], note: str
           ) -> list[VisualCount]:
    """Each size counted with the processor loaded from ``source`` (``path`` itself, or a stand-in view of it)."""
    from PIL import Image

    plain = lambda o: o.tolist() if hasattr(o, "tolist") else str(o)  # noqa: E731 - tensors, arrays -> lists
    counts = []
    try:
        processor = chosen.processor_for(str(source))
        processor.tokenizer.padding_side = "left"
        chosen.on_load(model, processor)
        for width, height in sizes:
            batch = chosen.build_batch(processor, [Image.new("RGB", (width, height))],
                                       [chosen.grounding_prompt("it")])
            meta = json.loads(json.dumps(batch.meta[0], default=plain)) if batch.meta else {}  # JSON-ready
            counts.append(VisualCount(width, height, tokens=len(batch.visual_positions[0]),
                                      cells=int(batch.cell_tokens[0].sum()), note=note, meta=meta))
    except (OSError, ValueError, TypeError, AttributeError, ImportError, KeyError, NotImplementedError) as e:
        detail = " ".join(str(e).replace(str(source), str(path)).split())  # one line, never the stand-in's folder
        why = f"the processor in {path} could not expand an image ({type(e).__name__}: {detail})"
        why += "; tried with a stand-in tokenizer, the checkpoint having no tokenizer files" if note else ""
        return [VisualCount(w, h, note=why) for w, h in sizes]
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
