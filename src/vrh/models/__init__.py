"""Models: the adapters (:mod:`vrh.models.adapters`, one file per family), loading a checkpoint through one
(:mod:`vrh.models.loading`) and running it (:mod:`vrh.models.generation`).

The package also answers for ``vrh.inference``, the module both once were: ``from vrh.inference import
load_model, generate_answers`` resolves each name from the module that now defines it.
"""

from __future__ import annotations

import importlib
from typing import Any

_FROM = ("vrh.models.loading", "vrh.models.generation")


def __getattr__(name: str) -> Any:
    for mod in _FROM:
        module = importlib.import_module(mod)
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module 'vrh.models' has no attribute {name!r}")
