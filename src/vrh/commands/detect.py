"""``vrh detect``: score every LM head on grounding samples and rank them (paper Sec. 3).

The run is :func:`vrh.experiments.detection.run_detect`; its options are
:class:`vrh.experiments.settings.DetectRunSettings`.
"""

from __future__ import annotations

from typing import Any

from vrh.experiments.settings import DetectRunSettings as Config

NAME = Config.COMMAND
HELP = "score every LM head on grounding samples and rank them"


def run(cfg: Config, lm: Any = None) -> dict[str, Any]:
    """Writes a detection run folder; returns head_scores.json."""
    from vrh.experiments.detection import run_detect

    return run_detect(cfg, lm).to_json()
