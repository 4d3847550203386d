"""``vrh text-heads`` refuses what it cannot run before it builds a prompt (issue 45 items 11, 16): contexts
beyond the model's positions, more needle tests than a run may hold, an empty ``--seeds``."""

from __future__ import annotations

import pytest

from vrh.cli import main
from vrh.experiments import text_heads
from vrh.experiments.settings import TextHeadsSettings

FAST = dict(model="organism:organism_c", haystack="items", contexts=(40,), depths=(0.0, 0.5), needles=2, seeds=(0,),
            k=2, max_new_tokens=12)


@pytest.fixture
def no_prompts(monkeypatch):
    """Building a needle prompt fails the test: each refusal below comes before any is built."""
    monkeypatch.setattr(text_heads, "build_prompts", lambda *a, **k: pytest.fail("a prompt was built"))


@pytest.fixture(scope="module")
def organism_c():
    from vrh.models.loading import load_model

    return load_model("organism:organism_c")


@pytest.mark.parametrize("haystack", ["items", None])  # None: the default is resolved by building a probe prompt
def test_contexts_beyond_the_model_are_refused_before_a_prompt_is_built(tmp_path, organism_c, no_prompts, haystack):
    cfg = TextHeadsSettings(out=str(tmp_path / "o"), **{**FAST, "haystack": haystack, "contexts": (100_000,)})
    with pytest.raises(ValueError, match=r"^--contexts 100000 \+ --max-new-tokens 12 exceed the model's 256 "
                                         r"positions$"):
        text_heads.run_text_heads(cfg, organism_c)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, message", [
    (["--needles", "100000000"], "1,000,000,000 needle tests (5 contexts x 2 depths x 1 needle lengths x --needles "
                                 "100000000) are more than the 100,000 one run may hold; lower --needles"),
    (["--needles", "0"], "--needles must be >= 1"),
    (["--seeds", ""], "--seeds is empty: the random control needs at least one seed"),
    (["--contexts", "0"], "--contexts must be prompt lengths >= 1 token, got [0]"),
])
def test_settings_are_refused_before_the_model_loads(tmp_path, capsys, monkeypatch, no_prompts, args, message):
    from vrh.experiments import setup

    monkeypatch.setattr(setup, "load", lambda *a, **k: pytest.fail("the model was loaded"))
    rc = main(["text-heads", "--model", "organism:organism_c", "--haystack", "items", "--contexts", "10,20,30,40,50",
               "--depths", "0,1", *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1, err
