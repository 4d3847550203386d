"""lab/scripts/organism_d_digits.py: each coordinate's digits are scored at the right answer positions (an
oracle that predicts every next token scores 1, one that is always a token behind scores 0 on the numbers)."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from vrh.organism import world

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab" / "scripts"))
import organism_d_digits as digits  # noqa: E402


def test_number_spans_find_the_four_coordinates():
    text = '{"box_2d": [62, 7, 946, 1000]}'
    assert [text[i:j] for i, j in digits.number_spans(text)] == ["62", "7", "946", "1000"]


class _Shifted(torch.nn.Module):
    """Hidden state at t = one-hot of the token at t + 1 + lag: with lag 0 the argmax is the true next token."""

    def __init__(self, vocab: int, lag: int):
        super().__init__()
        self.vocab, self.lag = vocab, lag
        self.lm_head = torch.nn.Identity()

    def model(self, input_ids, **_):
        nxt = torch.roll(input_ids, -(1 + self.lag), dims=1)
        return SimpleNamespace(last_hidden_state=torch.nn.functional.one_hot(nxt, self.vocab).float())


@pytest.mark.parametrize("lag, want", [(0, 1.0), (-1, 0.0)])
def test_teacher_forced_digits_are_read_at_the_answer_positions(lag, want):
    from vrh.testing.tiny_gemma3 import tiny_gemma3

    _, proc = tiny_gemma3(seed=0)
    samples = [world.grounding_sample(10_000, i) for i in range(6)]
    res = digits.digit_accuracy(_Shifted(len(proc.tokenizer), lag), proc, samples, bs=4)
    assert res["n"] == 6
    for c in digits.COORDS:
        v = res["coords"][c]
        if want:
            assert v["leading_digit"] == v["whole_number"] == 1.0
        else:  # a step behind: the digit predicted is the previous token (a separator or another digit)
            assert v["whole_number"] == 0.0
        assert 1 / 6 <= v["constant_leading_digit"] <= 1.0


def test_the_place_probe_finds_a_linear_code_and_not_noise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(240, 20, generator=g, dtype=torch.float64)
    y = x[:, :2] @ torch.tensor([[0.5, -0.2], [0.1, 0.3]], dtype=torch.float64) + 0.5
    assert digits.cv_ridge_r2(x[:160], y[:160], x[160:], y[160:]) > 0.99
    noise = torch.rand(240, 2, generator=g, dtype=torch.float64)
    assert digits.cv_ridge_r2(x[:160], noise[:160], x[160:], noise[160:]) < 0.1


def test_probe_features_take_the_position_before_the_first_digit_and_the_centre_cell():
    from vrh.testing.tiny_gemma3 import tiny_gemma3

    model, proc = tiny_gemma3(seed=0)
    samples = [world.grounding_sample(10_000, i) for i in range(3)]
    feats, vis, target = digits.probe_features(model.eval(), proc, samples, bs=2)
    layers = model.config.text_config.num_hidden_layers
    assert feats.shape == (3, layers + 1, model.config.text_config.hidden_size) and vis.shape[:2] == (3, 2)
    assert ((0 <= target) & (target <= 1)).all()
