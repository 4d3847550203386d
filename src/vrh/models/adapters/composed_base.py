"""The base class of the families transformers does not define, composed from native parts and loaded without remote
code (:mod:`vrh.models.composed` has the strict loading they share with the organisms' bases).

A composed family (DeepSeek-VL2, Magma, Phi-4-Reasoning-Vision: one package each beside the other adapters, its
adapter in the package's ``__init__``, its modules and processor beside it) ships its checkpoint with
``trust_remote_code`` modeling files that vrh never runs. Underneath, each is a language model transformers has
natively, a vision tower it has (or a small port), and a few glue pieces (projector, separator embeddings). Its
adapter (:class:`ComposedAdapter`) builds that module tree from the checkpoint's raw ``config.json`` and fills it
from the checkpoint's own safetensors **strictly** (:func:`~vrh.models.composed.load_strict`): every published tensor
consumed, every parameter filled, or a one-line error naming what did not match.

What an adapter provides: :meth:`ComposedAdapter.build_model` (raw config dict -> an ``nn.Module`` with
``.config``, ``generate`` and the decoder layers where :meth:`~vrh.models.adapters.base.Adapter.decoder_layers`
says), :meth:`ComposedAdapter.convert_state` (the checkpoint's tensors by their published names -> the module's
state-dict names; many-to-one merges such as stacked MoE experts go here) and its own processor
(:meth:`ComposedAdapter.processor_for`).

Why it lives in this package: a family subclasses it, and discovery imports the families while this package's
``__init__`` runs; a base class outside the package that imported ``adapters.base`` was an import loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from vrh.models.adapters.base import Adapter

if TYPE_CHECKING:
    import torch
    from torch import nn


class ComposedAdapter(Adapter):
    """An adapter for a checkpoint that transformers has no class for: the module tree is built from the raw
    config (:meth:`build_model`), the weights come from the checkpoint's safetensors through
    :meth:`convert_state` and :func:`load_strict`. Never ``trust_remote_code``."""

    # What ``vrh models`` says of a composed family (no transformers class vouches for it): what the CPU tests check,
    # what only the real weights on a GPU can, and which published files were seen only in part (None: all seen).
    verified_on_cpu = ("tiny random-init build, strict loading under the published key names and config schema, "
                       "shared adapter suite")
    needs_gpu = "logit parity against the remote code, the answer format"
    config_gaps: str | None = None

    def build_model(self, config: dict[str, Any]) -> nn.Module:
        """The randomly initialised (or, under ``torch.device("meta")``, storage-free) model that
        ``config`` (the raw ``config.json``) describes."""
        raise NotImplementedError

    def convert_state(self, tensors: Iterator[tuple[str, torch.Tensor]], config: dict[str, Any]
                      ) -> dict[str, torch.Tensor]:
        """The checkpoint's tensors (published names) -> the state dict of :meth:`build_model`'s module."""
        raise NotImplementedError

    def load(self, path: str, *, dtype: torch.dtype | None = None, device: str = "cpu",
             attn_implementation: str = "sdpa", device_map: str | dict | None = None) -> tuple[nn.Module, Any]:
        import torch

        from vrh.models.composed import (check_buffers, checkpoint_folder, empty_parameters, iter_checkpoint,
                                         load_strict, read_config)

        dtype = torch.float32 if dtype is None else dtype  # as Adapter.load
        if device_map is not None:
            raise ValueError(f"--device-map is not supported for {self.name} (a composed family vrh builds "
                             "itself); load it on one device")
        folder = checkpoint_folder(path)
        config = read_config(folder)
        config = {**config, "_attn_implementation": attn_implementation}
        with empty_parameters():
            try:
                model = self.build_model(config)
            except (KeyError, TypeError, AttributeError, IndexError) as e:  # a config of another family's shape
                raise ValueError(f"{folder / 'config.json'} does not describe a {self.name} checkpoint (building it "
                                 f"failed: {type(e).__name__}: {' '.join(str(e).split())[:160]})") from None
        state = self.convert_state(iter_checkpoint(folder), config)
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
        load_strict(model, state, what=f"checkpoint {path}")
        check_buffers(model)
        if (folder / "generation_config.json").is_file():  # the checkpoint's stop tokens (Magma-8B: <|eot_id|>)
            from transformers import GenerationConfig

            model.generation_config = GenerationConfig.from_pretrained(str(folder), trust_remote_code=False)
        processor = self.processor_for(str(folder))
        processor.tokenizer.padding_side = "left"
        self.on_load(model, processor)
        return model.to(device).eval(), processor
