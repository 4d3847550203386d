"""``vrh transfer``: cross-model masking (paper Sec. 5.3, Fig. 7): mask the top-k heads detected in model A
at the same (layer, head) indices of model B and judge B's answers, against B unmasked, B's own top-k and k
random heads outside both.

The run is :func:`vrh.experiments.transfer.run_transfer`; its options are
:class:`vrh.experiments.settings.TransferSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.experiments.settings import TransferSettings as Config

NAME = Config.COMMAND
HELP = "mask model A's top-k heads in model B (same layer x head grid) vs B's own and random"


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a transfer run folder; returns results.json."""
    from vrh.experiments.transfer import run_transfer

    return run_transfer(cfg, lm).to_json()
