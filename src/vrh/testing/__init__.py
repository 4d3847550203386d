"""Test helpers: tiny random-init real VLM architectures with offline processors."""

from vrh.testing.builders import TINY_BUILDERS
from vrh.testing.tiny_models import save_tiny, tiny_llava, tiny_qwen2_5_vl, tiny_qwen2_vl, tiny_qwen3_vl

__all__ = ["TINY_BUILDERS", "save_tiny", "tiny_llava", "tiny_qwen2_5_vl", "tiny_qwen2_vl", "tiny_qwen3_vl"]
