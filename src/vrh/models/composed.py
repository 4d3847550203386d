"""Strict loading from a checkpoint's own safetensors, for modules vrh builds itself: the composed families
(:class:`vrh.models.adapters.composed_base.ComposedAdapter`: DeepSeek-VL2, Magma, Phi-4-Reasoning-Vision, which
transformers does not define) and the organisms' bases.

A module is built with its parameters on the meta device (:func:`empty_parameters`), then filled **strictly**
(:func:`load_strict`): every published tensor consumed, every parameter filled, or a one-line error naming what did
not match. The checkpoint is read from safetensors only (:func:`weight_files`; pickled weights are refused), its
``config.json`` as a raw dict (:func:`read_config`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn


def checkpoint_folder(path: str, revision: str | None = None) -> Path:
    """The local folder of ``path``: the folder itself, or a hub id's snapshot in the local cache (offline: the
    files must already be there; nothing is downloaded here)."""
    folder = Path(path).expanduser()
    if folder.is_dir():
        return folder
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(path, revision=revision, local_files_only=True))


def read_config(path: str | Path) -> dict[str, Any]:
    """The raw ``config.json`` of a checkpoint folder, as a dict (no ``AutoConfig``: transformers does not
    define these model types)."""
    from vrh.models import preflight

    return preflight.read_config(str(path))


def tokenizer_config(folder: str | Path) -> Any:
    """The raw ``config.json`` as a plain ``PretrainedConfig``, for ``AutoTokenizer.from_pretrained(..., config=)``.
    Left to itself, AutoTokenizer builds the same object with ``PretrainedConfig.from_pretrained``, which warns on
    every load that the checkpoint's model type is not the base class's ("You are using a model of type ..."):
    true of every composed family and no news. ``from_dict`` builds it without that warning (and without
    silencing any other). None for a folder without ``config.json`` (a processor saved alone): nothing to read.
    Its ``auto_map`` (the published remote code this family's port replaces) is left out: no Auto class sees it."""
    from transformers import PretrainedConfig

    if not (Path(folder) / "config.json").is_file():
        return None
    return PretrainedConfig.from_dict({k: v for k, v in read_config(folder).items() if k != "auto_map"})


def weight_files(folder: Path) -> list[Path]:
    """The checkpoint's safetensors files: those its ``model.safetensors.index.json`` lists, else
    ``model.safetensors``. Pickled weights (``*.bin``) are refused: reading them could run code."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise FileNotFoundError(f"{folder}: {len(missing)} weight file(s) its index lists are missing "
                                    f"(first: {missing[0]})")
        return [folder / n for n in names]
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    if any(folder.glob("*.bin")):
        raise ValueError(f"{folder} holds pickled weights (*.bin) and no safetensors; vrh loads this family from "
                         "safetensors only (converting: torch.load(..., weights_only=True), then "
                         "safetensors.torch.save_file)")
    raise FileNotFoundError(f"{folder} has no model.safetensors or model.safetensors.index.json")


def iter_checkpoint(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of the checkpoint, by its published name."""
    from safetensors import safe_open

    for file in weight_files(folder):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                yield key, f.get_tensor(key)


def load_strict(model: nn.Module, state: dict[str, torch.Tensor], *, what: str) -> None:
    """Copy ``state`` into ``model``: every key a parameter or buffer of ``model`` with the same shape, every
    parameter of ``model`` filled (non-persistent buffers aside). Raises ValueError naming the first few
    unmatched keys; ``what`` names the checkpoint in the message."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(k for k in set(state) & set(expected) if tuple(state[k].shape) != tuple(expected[k].shape))
    if missing or unexpected or shapes:
        parts = []
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape mismatch", shapes)):
            if keys:
                shown = ", ".join(keys[:5]) + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "")
                parts.append(f"{len(keys)} {label}: {shown}")
        if shapes:
            k = shapes[0]
            parts.append(f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}")
        raise ValueError(f"{what} does not match the module vrh builds from its config.json ({'; '.join(parts)})")
    model.load_state_dict(state, strict=True, assign=any(p.is_meta for p in model.parameters()))


@contextlib.contextmanager
def empty_parameters() -> Iterator[None]:
    """Build modules with their parameters on the meta device (no storage, no random init: a 15B model is built
    in seconds) and their buffers as usual: non-persistent buffers (rotary ``inv_freq``, position ids) are not in
    a checkpoint, so they must get their real values at construction. Parameters are filled by
    :func:`load_strict` (``assign``)."""
    original = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is not None and not param.is_meta:
            kwargs = {"requires_grad": param.requires_grad}
            module._parameters[name] = type(param)(module._parameters[name].to("meta"), **kwargs)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def check_buffers(model: nn.Module) -> None:
    """Every buffer has a value (none left on the meta device)."""
    for name, buf in model.named_buffers():
        if buf.is_meta:
            raise ValueError(f"buffer {name} has no value after loading; build_model must create it with a value")
