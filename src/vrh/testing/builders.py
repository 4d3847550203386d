"""adapter name -> tiny builder; the shared adapter suite asserts every registered adapter has one. Each build's
tokenizer is also the family's stand-in (:func:`stand_in_tokenizer`) where a checkpoint ships none.

Its own module (not in ``tiny_models``) because the family builders import ``tiny_models``' tokenizer
and config helpers: collecting them here keeps the imports one-way.
"""

from typing import Any

from vrh.testing.tiny_deepseek_vl2 import tiny_deepseek_vl2
from vrh.testing.tiny_gemma3 import tiny_gemma3
from vrh.testing.tiny_glm4v import tiny_glm4v
from vrh.testing.tiny_idefics3 import tiny_idefics3
from vrh.testing.tiny_internvl import tiny_internvl
from vrh.testing.tiny_llava_next import tiny_llava_next
from vrh.testing.tiny_llava_onevision import tiny_llava_onevision
from vrh.testing.tiny_mllama import tiny_mllama
from vrh.testing.tiny_magma import tiny_magma
from vrh.testing.tiny_models import tiny_llava, tiny_qwen2_5_vl, tiny_qwen2_vl, tiny_qwen3_vl
from vrh.testing.tiny_paligemma import tiny_paligemma
from vrh.testing.tiny_phi4_vision import tiny_phi4_vision

TINY_BUILDERS = {
    "qwen2_vl": tiny_qwen2_vl,
    "qwen2_5_vl": tiny_qwen2_5_vl,
    "qwen3_vl": tiny_qwen3_vl,
    "llava": tiny_llava,
    "internvl": tiny_internvl,
    "glm4v": tiny_glm4v,
    "llava_next": tiny_llava_next,
    "idefics3": tiny_idefics3,
    "llava_onevision": tiny_llava_onevision,
    "paligemma": tiny_paligemma,
    "gemma3": tiny_gemma3,
    "phi4_reasoning_vision": tiny_phi4_vision,
    "deepseek_vl2": tiny_deepseek_vl2,
    "mllama": tiny_mllama,
    "magma": tiny_magma,
}


def stand_in_tokenizer(family: str) -> Any:
    """The tokenizer of ``family``'s tiny build (the family's special tokens and chat template over a small
    vocabulary), or None where the adapter name ``family`` has no tiny build (a custom adapter). ``vrh models
    --inspect`` counts the visual tokens of a checkpoint without tokenizer files with it: the processor expands
    the image placeholder as its configs say, whatever the vocabulary. Read-only (the builds are cached)."""
    builder = TINY_BUILDERS.get(family)
    return None if builder is None else builder()[1].tokenizer
