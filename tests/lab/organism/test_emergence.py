"""The emergence tracker's head-score map is vrh's ``out/sum/mean`` scorer (:class:`VariantScorer`) on the rows
that produce the answer tokens (``Q_out`` = answer positions - 1, EOS excluded), not on the answer tokens' own
rows: checked against the scorer fed the full rows and an independent batched formula."""

import pytest
import torch

from vrh.organism import world
from vrh.scoring import SampleInfo, VariantScorer
from vrh_lab.organism.batches import train_batch
from vrh_lab.organism.emergence import answer_positions, sample_infos, score_map
from vrh_lab.organism.text_tasks import text_sample
from vrh_lab.organism.train import PRESETS, Organisms


@pytest.fixture(scope="module")
def org():
    torch.manual_seed(0)
    return Organisms(PRESETS["tiny"])


def _rows(org, samples):
    b = train_batch(samples, org.tok, org.spec_a)
    with torch.no_grad():
        out = org.a(input_ids=b.input_ids, attention_mask=b.attention_mask, pixel_values=b.pixel_values,
                    output_attentions=True)
    return b, torch.stack(out.attentions, 1)  # [B, L, H, S, S]


@pytest.mark.parametrize("make", [world.grounding_sample, text_sample], ids=["image", "text"])
def test_score_map_is_variant_scorer_out_sum_mean_on_the_producer_rows(org, make):
    samples = [make(5, i) for i in range(5)]
    ours = score_map(org.a, org.tok, org.spec_a, samples)  # one batch, as below
    b, att = _rows(org, samples)
    want, own = VariantScorer("out/sum/mean"), VariantScorer("out/sum/mean")
    for j in range(len(samples)):
        ans = (b.labels[j] != -100).nonzero().reshape(-1)[:-1]  # (A,) answer tokens, EOS excluded
        for sc, q in ((want, ans - 1), (own, ans)):  # every row S given; Q_out = the rows producing them
            sc.update(att[j], SampleInfo(key_positions=b.box_keys[j], visual_positions=b.visual[j],
                                         queries={"out": q}))
    assert ours.shape == (2, 4) and float(ours.sum()) > 0
    assert torch.allclose(ours, want.result(), rtol=0, atol=1e-7)
    assert not torch.allclose(ours, own.result(), rtol=0, atol=1e-4)  # the answer tokens' own rows differ


def test_score_map_equals_the_batched_formula_on_the_producer_rows(org):
    samples = [world.grounding_sample(5, i) for i in range(6)]
    b, att = _rows(org, samples)
    q = b.labels != -100  # [B, S]: answer tokens + EOS
    q = q & (q.long().cumsum(1) < q.sum(1, keepdim=True))  # EOS excluded
    prod = torch.roll(q, -1, dims=1)  # [B, S]: position i produces token i + 1
    mass = (att * b.box_keys[:, None, None, None, :].to(att.dtype)).sum(-1)  # [B, L, H, S]
    per = (mass * prod[:, None, None, :].to(att.dtype)).sum(-1) / prod.sum(1).clamp(min=1)[:, None, None]  # [B, L, H]
    assert torch.allclose(score_map(org.a, org.tok, org.spec_a, samples), per.mean(0), rtol=0, atol=1e-6)


def test_sample_infos_use_vrhs_query_sets(org):
    samples = [world.grounding_sample(5, 0), text_sample(5, 1)]
    b = train_batch(samples, org.tok, org.spec_a)
    for j, (positions, info) in enumerate(sample_infos(b, org.tok)):
        ans = answer_positions(b.labels[j])
        assert positions[info.query("out")].tolist() == (ans - 1).tolist()  # Q_out: answer positions - 1
        assert positions[info.query("out_own")].tolist() == ans.tolist()
        first = int((b.labels[j] != -100).nonzero()[0])
        assert positions[info.query("last_prompt")].tolist() == [first - 1]  # the first producer: last prompt token


def test_answer_positions_are_the_answer_tokens_without_eos():
    labels = torch.tensor([-100, -100, 7, 8, 9, 2, -100])  # answer 7 8 9, EOS 2, right padding
    assert answer_positions(labels).tolist() == [2, 3, 4]
