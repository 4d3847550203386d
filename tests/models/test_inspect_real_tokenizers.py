"""``vrh models --inspect`` (``inspect_checkpoint``) on the shared real folders with their real tokenizers
(:mod:`tests.support.real_tokenizers`) instead of the tiny stand-ins of ``test_inspect.py``: the same visual-token
and cell counts (``../shared/real/SOURCES.md``; paper App. I for InternVL3's 3,328), now with the checkpoints'
own vocabularies and special-token ids. Skips where ``../shared`` or the vocabulary packages are absent. Slow
(about 25 s: three meta builds and processors; ``-m slow``): the fast tier counts the same sizes through the
adapter in ``test_real_tokenizers.py``.
"""

from pathlib import Path

import pytest

from vrh.models.inspect import inspect_checkpoint
from tests.support.real_tokenizers import checkpoint_with_tokenizer

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "real"
needs_real = pytest.mark.skipif(not (REAL / "checkpoints").is_dir(),
                                reason="the real checkpoint files (../shared/real) are absent")

# folder, adapter, LM heads, {(W, H): (visual tokens, cells)}, the image token's id (the folder's config.json)
CASES = [
    ("qwen2_5_vl_7b", "qwen2_5_vl", 784, {(448, 448): (256, 256), (640, 480): (391, 391), (1792, 1344): (3072, 3072)},
     151655),
    ("internvl3_8b_hf", "internvl", 784,
     {(448, 448): (256, 256), (640, 480): (3328, 3072), (1792, 1344): (3328, 3072)}, 151667),
    ("llama3_llava_next_8b_hf", "llava_next", 1024,
     {(448, 448): (2928, 2304), (640, 480): (2340, 1728), (1792, 1344): (2340, 1728)},
     128256),
]


@pytest.mark.slow
@needs_real
@pytest.mark.parametrize("folder, family, heads, counts, image_id", CASES, ids=[c[0] for c in CASES])
def test_inspect_counts_with_the_real_vocabulary(tmp_path, folder, family, heads, counts, image_id):
    from transformers import AutoTokenizer

    path = checkpoint_with_tokenizer(folder, REAL, tmp_path / folder)
    if path is None:
        pytest.skip(f"the vocabulary package of {folder} is not installed")
    found = inspect_checkpoint(str(path), image_sizes=tuple(counts))
    assert (found.adapter, found.total_heads) == (family, heads)
    assert {(v.width, v.height): (v.tokens, v.cells) for v in found.visual} == counts, [v.note for v in found.visual]
    token = {"qwen2_5_vl": "<|image_pad|>", "internvl": "<IMG_CONTEXT>", "llava_next": "<image>"}[family]
    assert AutoTokenizer.from_pretrained(path).convert_tokens_to_ids(token) == image_id
