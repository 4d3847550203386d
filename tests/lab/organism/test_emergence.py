"""The emergence tracker's head-score map is vrh's Eq. 1 scorer on the same attention rows (no second copy of
the statistic), and its numbers are those of the batched formula it replaced."""

import pytest
import torch

from vrh.organism import world
from vrh.scoring import SampleInfo, make_scorer
from vrh_lab.organism.batches import train_batch
from vrh_lab.organism.emergence import answer_queries, score_map
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
def test_score_map_is_vrhs_out_sum_mean_scorer_on_the_same_rows(org, make):
    samples = [make(5, i) for i in range(5)]
    ours = score_map(org.a, org.tok, org.spec_a, samples)  # one batch, as below
    b, att = _rows(org, samples)
    scorer = make_scorer("out/sum/mean")
    for j in range(len(samples)):
        # the lab's query rows (the answer tokens' own positions) handed to the scorer as its query set
        info = SampleInfo(key_positions=b.box_keys[j], visual_positions=b.visual[j],
                          queries={"out": answer_queries(b.labels[j])})
        scorer.update(att[j], info)
    assert ours.shape == (2, 4) and torch.equal(ours, scorer.result())
    assert scorer.n_empty_keys == scorer.n_empty_queries == 0 and float(ours.sum()) > 0


def test_score_map_keeps_the_numbers_of_the_batched_formula_it_replaced(org):
    samples = [world.grounding_sample(5, i) for i in range(6)]
    b, att = _rows(org, samples)
    q = b.labels != -100  # [B, S]: answer tokens + EOS
    q = q & (q.long().cumsum(1) < q.sum(1, keepdim=True))  # EOS excluded
    mass = (att * b.box_keys[:, None, None, None, :].to(att.dtype)).sum(-1)  # [B, L, H, S]
    per = (mass * q[:, None, None, :].to(att.dtype)).sum(-1) / q.sum(1).clamp(min=1)[:, None, None]  # [B, L, H]
    # float32 summation order only: emergence.jsonl keeps 5 decimals
    assert torch.allclose(score_map(org.a, org.tok, org.spec_a, samples), per.mean(0), rtol=0, atol=1e-6)


def test_answer_queries_are_the_answer_tokens_without_eos():
    labels = torch.tensor([-100, -100, 7, 8, 9, 2, -100])  # answer 7 8 9, EOS 2, right padding
    assert answer_queries(labels).tolist() == [2, 3, 4]
