"""Phi-4-Reasoning-Vision: the ported processor, on its own (:mod:`vrh.models.adapters.phi4_vision.processing`).
The family end to end (loading, the adapter) is tests/models/adapters/test_phi4_vision.py."""

from __future__ import annotations

import pytest
from PIL import Image

from vrh.models.adapters.phi4_vision.processing import Phi4VisionImageProcessor


@pytest.mark.parametrize("size, resized", [
    # (W, H) -> resized (W', H'): 150x100 has 9 x 6 = 54 < 256 patches, so it is scaled up for a 256 budget: the
    # largest scale with ceil(150 s / 16) * ceil(100 s / 16) <= 256 gives 19 x 13 = 247 patches (aspect kept)
    ((150, 100), (304, 208)),
    ((640, 480), (640, 480)),  # 40 x 30 = 1200 patches, in range, already multiples of 16: unchanged
    # 112 x 84 = 9408 > 3600 patches, scaled down: 69 x 52 = 3588 (70 columns would need 52 rows: 3640)
    ((1792, 1344), (1104, 832)),
])
def test_resize_follows_the_remote_no_upscale_rule(size, resized):
    ip = Phi4VisionImageProcessor(16, 256, 3600)
    assert ip.target_size(*size) == resized
    out = ip([Image.new("RGB", size)])
    assert out["spatial_shapes"].tolist() == [[resized[1] // 16, resized[0] // 16]]
    assert int(out["pixel_attention_mask"].sum()) == (resized[0] // 16) * (resized[1] // 16)
