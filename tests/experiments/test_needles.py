"""The generated needle-in-a-haystack prompts (vrh.experiments.needles): a fair test, judged exactly."""

import re

import pytest

from vrh.experiments.needles import build_prompts, judge, unknown_words

words = lambda text: len(text.split())  # noqa: E731 - a stand-in tokenizer: one token per word


def test_prompts_are_deterministic_fill_the_context_and_put_the_needle_at_its_depth():
    kw = dict(style="sentences", contexts=(60, 200), depths=(0.0, 0.5, 1.0), lengths=(3, 6), needles=2, seed=4)
    a, b = build_prompts(words, **kw), build_prompts(words, **kw)
    assert a == b and len(a) == 2 * 3 * 2 * 2 and len({p.id for p in a}) == len(a)
    assert build_prompts(words, **{**kw, "seed": 5}) != a
    for p in a:
        assert p.context - 20 < words(p.body) <= p.context  # filled by whole sentences, never beyond
        assert len(p.values) == p.length and p.body.count(p.needle) == 1
        before = p.body[:p.body.index(p.needle)].count(".")  # sentences before the needle
        assert before == round(p.depth * p.units)


def test_the_needle_cannot_be_read_off_the_haystack():
    for p in build_prompts(words, style="sentences", contexts=(300,), depths=(0.5,), lengths=(4,), needles=20):
        hay = p.body.replace(p.needle, "")
        hay = hay[:hay.index("What is the secret code")]  # the haystack without the question
        assert not re.search(r"\d", hay) and "secret" not in hay
        assert p.decoys() == [] and p.chance == 100.0 ** -4
    for p in build_prompts(words, style="items", contexts=(120,), depths=(0.0, 1.0), lengths=(4,), needles=20):
        colour, shape = p.body.split("where is the ")[1].split()[:2]
        items = re.findall(r"(\w+) (\w+) (\w+) \[ ([\d ,]+) \]", p.body)
        named = [i for i in items if (i[1], i[2]) == (colour, shape)]
        assert len(named) == 1 and tuple(named[0][3].split(" , ")) == p.values  # exactly one item answers it
        assert sum(i[3] == named[0][3] for i in items) == 1  # no other item has its box
        assert p.chance == 1 / len(items) == 1 / (p.units + 1) and len(p.decoys()) == p.units
        assert tuple(p.values) not in p.decoys()


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="an 'items' needle is a box of 4 numbers"):
        build_prompts(words, style="items", contexts=(100,), depths=(0.5,), lengths=(6,), needles=1)
    with pytest.raises(ValueError, match="--contexts 10: the needle and the question alone take"):
        build_prompts(words, style="sentences", contexts=(10,), depths=(0.5,), lengths=(4,), needles=1)
    with pytest.raises(ValueError, match="--contexts 28: no haystack fits beside the needle"):
        build_prompts(words, style="sentences", contexts=(28,), depths=(0.5,), lengths=(4,), needles=1)
    with pytest.raises(ValueError, match=r"--depths must lie in \[0, 1\]"):
        build_prompts(words, style="sentences", contexts=(100,), depths=(1.5,), lengths=(4,), needles=1)
    with pytest.raises(ValueError, match="--haystack must be one of"):
        build_prompts(words, style="book", contexts=(100,), depths=(0.5,), lengths=(4,), needles=1)


def test_answers_are_judged_exactly_and_unknown_words_are_found():
    p = build_prompts(words, style="items", contexts=(60,), depths=(0.5,), lengths=(4,), needles=1)[0]
    assert judge(p, "[ " + " , ".join(p.values) + " ]") and not judge(p, "[ " + " , ".join(p.values[:3]) + " ]")
    assert not judge(p, " ".join(reversed(p.values))) and not judge(p, "")
    vocab = {"red": 5, "circle": 6}
    tokenize = lambda w: [vocab.get(w, 3)]  # noqa: E731
    assert unknown_words(tokenize, 3, "red circle secret") == ["secret"]
    assert unknown_words(tokenize, None, "anything goes") == []  # a byte-level tokenizer has no unknown token
