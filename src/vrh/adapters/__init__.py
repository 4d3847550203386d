"""Model-family adapters. Each file in this package defines and registers one adapter."""

from __future__ import annotations

import importlib
import pkgutil

from vrh.adapters.base import Adapter, VisionBatch, register_adapter, registered_adapters

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")


def get_adapter(model_type_or_name: str) -> Adapter:
    """The adapter for a ``config.model_type`` (or an adapter name)."""
    for cls in registered_adapters().values():
        if model_type_or_name == cls.name or model_type_or_name in cls.model_types:
            return cls()
    known = sorted(t for c in registered_adapters().values() for t in c.model_types)
    raise ValueError(f"no vrh adapter for model type {model_type_or_name!r}; supported: {known}")


__all__ = ["Adapter", "VisionBatch", "get_adapter", "register_adapter", "registered_adapters"]
