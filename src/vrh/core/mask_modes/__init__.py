"""Mask modes beyond ``zero`` and ``uniform``, one file each; each file registers its mode with
:func:`vrh.core.masking.register_mask_mode` when imported.

:mod:`vrh.core.masking` imports this package (by name, on the first lookup of its registry) so that
``--mask-mode``, a :class:`~vrh.experiments.conditions.Condition` and the runner see every mode; the files must
therefore not import torch at import time (``vrh --help`` reads the mode names).
"""

from __future__ import annotations

import importlib
import pkgutil

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_mod}")
