"""DeepSeek-VL2: the ported processor, on its own (:mod:`vrh.models.adapters.deepseek_vl2.processing`).
The family end to end (loading, the adapter) is tests/models/adapters/test_deepseek_vl2.py."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from ..pixels import coord_image


@pytest.mark.parametrize("size, box", [((150, 100), (72, 72)), ((70, 90), (72, 144)), ((641, 479), (768, 384)),
                                       ((384, 384), (384, 384)), ((33, 250), (1152, 384))])
def test_letterbox_is_imageops_pad(size, box):
    """The processor's views are ``ImageOps.pad(image, box, color=mean)`` pixel for pixel (what the remote
    processor calls), and the placement it reports is where the image went."""
    from PIL import ImageOps

    from vrh.models.adapters.deepseek_vl2.processing import letterbox

    image = coord_image(*size) if max(size) <= 256 else Image.new("RGB", size, (255, 255, 255))
    ours, (x0, y0, rw, rh) = letterbox(image, box, (127, 127, 127))
    theirs = np.asarray(ImageOps.pad(image, box, color=(127, 127, 127)))
    assert np.array_equal(np.asarray(ours), theirs)
    blue = theirs[..., 2] >= 254  # the image's pixels (B = 255), the bars are 127
    rows, cols = np.nonzero(blue)
    assert (cols.min(), rows.min(), cols.max() + 1 - cols.min(), rows.max() + 1 - rows.min()) == (x0, y0, rw, rh)
