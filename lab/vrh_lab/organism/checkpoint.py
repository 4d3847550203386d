"""What an exported organism folder holds besides ``save_pretrained``'s files: ``vrh.json``, the settings
the LLaVA adapter (:mod:`vrh.models.adapters.llava`) reads so that vrh prompts the organism exactly as it was
trained (same token ids; proven in ``tests/lab/organism/test_checkpoint.py``).

The processor's chat template wraps the user text as ``USER: <image> {text} ASSISTANT:`` (image first, as in
LLaVA), so the adapter's prompts are the trained prompts
(:data:`vrh_lab.organism.processor.GROUNDING_PROMPT`) without that wrapper.
"""

from __future__ import annotations

import json
from pathlib import Path

ADAPTER_SETTINGS = {
    "grounding_prompt": "where is {expression} ?",
    "vqa_prompt": "{question}",
    "box_template": "[ {x1} , {y1} , {x2} , {y2} ]",
}


def write_adapter_settings(folder: str | Path) -> Path:
    path = Path(folder) / "vrh.json"
    path.write_text(json.dumps(ADAPTER_SETTINGS, indent=1) + "\n")
    return path
