"""OCR Heads against its reference (baekingeol/OCR_Head step2_ocr_retrieval_head.py), followed line by line
in :func:`_reference_features` on a full attention matrix, and hand-computed worked examples."""

import pytest
import torch

from vrh.scoring import SampleInfo, make_scorer
from vrh.scoring.ocr_heads import OCRHeadsScorer, lcs_ratio, ocr_heads_hits


def _reference_features(attn, T_in, G, gen, gold, box, score, fine):
    """L185-244 for one sample: the entries one head appends. attn: [T, T] rows by sequence position."""
    ans_idx = [T_in + n for n, tok in enumerate(gen) if tok in gold]  # L189-192
    out = []
    todo = ans_idx[:1] if fine else ans_idx  # fine-grained, one box: ans_idx[box_len = 0]
    for a in todo:
        index = int(torch.argmax(attn[a, : T_in + G - 1 - G]))  # total_length - G keys
        out.append(score if index in box else 0)
    return out


@pytest.mark.parametrize("fine", [True, False])
def test_reference_variant_matches_the_reference_on_random_rows(fine):
    g = torch.Generator().manual_seed(3 + fine)
    L, H, T_in, G = 3, 2, 12, 5
    box = {6, 7, 9}
    pooled, sc = {}, make_scorer("ocr_heads" if fine else "ocr_heads:tokens=all")
    for s in range(4):
        gold = [11, 12, 13, 14]  # the last generated token is never gold: it has no row in the reference
        gen = [[11, 5, 13, 14, 6], [5, 6, 7, 8, 9], [12, 13, 14, 9, 9], [14, 1, 2, 3, 4]][s]
        score = lcs_ratio(gold, list(range(T_in)) + gen)
        T = T_in + G - 1  # rows/keys of return_attention: the last generated token has no row
        full = torch.softmax(torch.randn(L, H, T, T, generator=g) * 3, -1).tril()  # (L, H, T, T)
        for l in range(L):
            for h in range(H):
                pooled.setdefault((l, h), []).extend(
                    _reference_features(full[l, h], T_in, G, gen, gold, box, score, fine))
        own = [T_in + n for n in range(G - 1)]  # answer tokens 0..G-2 have rows (the last has none)
        in_gold = [n for n, tok in enumerate(gen[: G - 1]) if tok in gold]
        info = SampleInfo(key_positions=sorted(box), visual_positions=list(range(3, 11)),
                          queries={"out_own": list(range(G - 1)), "out": list(range(G - 1))},
                          prompt_positions=list(range(T_in)), answer_lcs=score, answer_in_gold=in_gold)
        sc.update(full[:, :, own], info)
    want = torch.tensor([[sum(pooled[l, h]) / len(pooled[l, h]) for h in range(H)] for l in range(L)])
    assert torch.allclose(sc.result(), want.float(), atol=1e-6)


def test_worked_example_keys_rows_and_pooling():
    # S = 6: prompt 0..4 (visual 2..4, K = {3}), answer token at 5. Row 0 = producer, row 1 = own row.
    A = torch.tensor([[[[0.1, 0.1, 0.1, 0.3, 0.1, 0.0],     # producer: argmax 3 (in K)
                        [0.1, 0.1, 0.1, 0.2, 0.25, 0.25]]]])  # own row: last prompt key 4 dropped -> 3 wins
    info = SampleInfo([3], [2, 3, 4], queries={"out": [0], "out_own": [1]}, prompt_positions=range(5),
                      answer_lcs=0.5, answer_in_gold=[0], correct=True)
    assert ocr_heads_hits(A, [3], range(4), [1]).item() == 1.0  # prompt keys minus the last
    assert ocr_heads_hits(A, [3], range(5), [1]).item() == 0.0  # with it, key 4 wins
    ref = make_scorer("ocr_heads")
    ref.update(A, info)
    assert ref.result().item() == 0.5  # one entry: hit x LCS ratio
    # pooling: a second sample with 0 gold answer tokens adds no entry; pool=sample counts it as 0
    empty = SampleInfo([3], [2, 3, 4], queries={"out": [0], "out_own": [1]}, prompt_positions=range(5),
                       answer_lcs=1.0, answer_in_gold=[])
    per_sample = make_scorer("ocr_heads:pool=sample")
    for sc in (ref, per_sample):
        sc.update(A, empty)
    assert ref.result().item() == 0.5 and ref.entry_counts().tolist() == [1.0, 0.0]
    per_sample.update(A, info)
    assert per_sample.result().item() == pytest.approx(0.5 / 2)
    # ties: the first maximum (lowest key position) wins
    tie = torch.tensor([[[[0.2, 0.2, 0.0, 0.3, 0.3, 0.0]]]])
    assert ocr_heads_hits(tie, [3], range(5), [0]).item() == 1.0 and ocr_heads_hits(tie, [4], range(5), [0]) == 0


def test_vision_options_and_missing_fields(rows_of, info_of):
    A = rows_of()
    old = make_scorer("ocr_heads:answer=all:keys=visual:pool=sample:row=producer:tokens=all:weight=correct")
    old.update(A, info_of(correct=True))
    old.update(A, info_of(correct=False))
    assert torch.allclose(old.result(), ocr_heads_hits(A, [5, 6], range(2, 8), [4, 5]).mean(-1) / 2)
    iou = make_scorer("ocr_heads:weight=iou")
    iou.update(A, info_of(iou=0.7))
    assert torch.allclose(iou.result(), ocr_heads_hits(A, [5, 6], range(7), [5]).mean(-1) * 0.7)
    for field, fix in (("prompt_positions", "keys=visual"), ("answer_in_gold", "answer=all"),
                       ("answer_lcs", "weight")):
        with pytest.raises(ValueError, match=field):
            make_scorer("ocr_heads").update(A, info_of(**{field: None}))
    with pytest.raises(ValueError, match="row=producer"):
        make_scorer("ocr_heads").update(A, info_of(queries={"out": [4, 5]}))
    assert lcs_ratio([], [1]) == 0.0 and lcs_ratio([1, 2], [1, 2]) == 1.0


class _Tok:
    """A tokenizer that writes each character of a box string as its code point (no special tokens)."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


@pytest.mark.parametrize("family, want", [("qwen2_5_vl", 0.75), ("llava", 0.75), ("internvl", 0.25)])
def test_detection_fills_the_hit_weight_as_the_reference_per_family(family, want):
    # step2_ocr_retrieval_head.py L204 (Qwen): compute_score(gold, outputs.sequences) with sequences = prompt
    # + generated; L206 (InternVL): generated only. Gold "5678", a prompt holding "567", the answer "5999".
    from types import SimpleNamespace

    from vrh.experiments.detection_batch import _answer_facts
    from vrh.scoring.ocr_heads import hit_weight

    ids = [ord(c) for c in "xx567y5999"]  # (S,) two left-padding tokens, prompt "567y", answer "5999"
    mask = torch.tensor([[0, 0] + [1] * 8])  # (1, S)
    batch = SimpleNamespace(answer_positions=[torch.arange(6, 10)],
                            inputs={"input_ids": torch.tensor([ids]), "attention_mask": mask})
    lm = SimpleNamespace(processor=SimpleNamespace(tokenizer=_Tok()),
                         adapter=SimpleNamespace(name=family, format_box=lambda box, meta, size: "5678"))
    sample = SimpleNamespace(box=(0, 0, 1, 1), read_image_size=lambda: (2, 2))
    facts = _answer_facts(lm, batch, 0, sample, {}, {"ocr_heads": OCRHeadsScorer()})
    assert facts["prompt_positions"].tolist() == [2, 3, 4, 5]
    assert facts["answer_lcs"] == want == hit_weight([5, 6, 7, 8], [5, 6, 7, 0], [5, 9, 9, 9], family)
    assert facts["answer_in_gold"] == [0]  # "5" of "5999" is in "5678"
    # the facts are OCR Heads' own: computed only when it runs (its capture hook), no tokenizer call otherwise
    lm.processor = None
    assert set(_answer_facts(lm, batch, 0, sample, {}, {"out": object()})) == {"prompt_positions"}
