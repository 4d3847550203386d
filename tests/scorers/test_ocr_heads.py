import pytest
import torch

from vrh.scorers import make_scorer
from vrh.scorers.ocr_heads import ocr_heads_sample


def test_ocr_heads_weight_and_visual_argmax(rows_of, info_of):
    A = rows_of()
    hits = ocr_heads_sample(A, [5, 6], [2, 3, 4, 5, 6, 7], [4, 5])
    sc = make_scorer("ocr_heads")
    sc.update(A, info_of(correct=True))
    sc.update(A, info_of(correct=False))
    assert torch.allclose(sc.result(), hits / 2)
    iou = make_scorer("ocr_heads", weight="iou")
    iou.update(A, info_of(iou=0.7))
    assert torch.allclose(iou.result(), hits * 0.7)
    with pytest.raises(ValueError, match="iou"):
        iou.update(A, info_of(iou=None))
    spec = make_scorer("ocr_heads:weight=iou")
    spec.update(A, info_of(iou=0.7))
    assert spec.name == "ocr_heads:weight=iou" and torch.equal(spec.result(), iou.result())
