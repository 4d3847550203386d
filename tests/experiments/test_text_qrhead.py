"""``vrh text-heads --text-scorer qrhead`` (vrh.experiments.text_qrhead): QRHead's query-focused score on the
needle tests, checked against an eager forward, on organism C and on a tiny Qwen2.5-VL's chat template."""

import os

import pytest
import torch

from vrh import runs
from vrh.experiments import text_heads, text_qrhead
from vrh.experiments.settings import TextHeadsSettings
from vrh.scoring.qrhead import qrhead_sample

FAST = dict(model="organism:organism_c", haystack="items", contexts=(40,), depths=(0.0, 1.0), needles=2, seeds=(0,),
            k=2, max_new_tokens=12, text_scorer="qrhead")


@pytest.fixture(scope="module")
def organism_c():
    from vrh.models.loading import load_model

    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    return load_model("organism:organism_c")


@pytest.fixture(scope="module")
def qr_run(tmp_path_factory, organism_c):
    out = tmp_path_factory.mktemp("qr") / "run"
    return out, text_heads.run_text_heads(TextHeadsSettings(out=str(out), **FAST), organism_c)


def _prompts(lm, **kw):
    tok = text_heads.tokenizer_of(lm.processor)
    return text_heads.build_prompts(lambda t: len(text_heads.encode(tok, t)), wrap=text_heads.chat_wrap(lm.processor),
                                    **kw)


def test_the_map_is_the_mean_over_every_test_and_the_causal_test_masks_its_top_k(qr_run):
    out, res = qr_run
    hs = runs.read_head_scores(out)
    none = [r for r in runs.read_samples(out) if r["condition"] == "none"]
    assert hs.scorer == "qrhead" == res["scorer"] and set(hs.variants) == {"copy_paste", "qrhead"}
    assert hs.n_scored == len(none) == 4  # every test, answered right or not
    assert torch.allclose(hs.scores("qrhead"), torch.stack([torch.tensor(r["qrhead"]) for r in none]).mean(0), atol=1e-6)
    assert hs.scores("qrhead").abs().sum() > 0  # the question looks somewhere, even where the answer is wrong
    top = next(c for c in res["conditions"] if c["condition"] == "top2:text")
    assert [tuple(h) for h in top["heads"]] == sorted(hs.ranking("qrhead")[:2]) and top["method"] == "qrhead"


def test_the_report_names_the_scorer(qr_run, tmp_path):
    from vrh.analyses.reporting import build_report

    build_report([str(qr_run[0])], tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| run | scorer |" in md and "| qrhead |" in md and "QRHead's query-focused one (qrhead)" in md


def test_one_tests_score_is_qrheads_criterion_on_eager_attention(qr_run, organism_c):
    out, _ = qr_run
    rec = [r for r in runs.read_samples(out) if r["condition"] == "none"][1]
    p = _prompts(organism_c, style="items", contexts=(40,), depths=(0.0, 1.0), lengths=(4,), needles=2, seed=0)[1]
    assert p.body.endswith(p.question) and p.question == "where is the " + p.needle.split()[1] + " " + \
        p.needle.split()[2] + " ?"
    wrap, tok = text_heads.chat_wrap(organism_c.processor), text_heads.tokenizer_of(organism_c.processor)
    lm = organism_c.model.model.language_model
    prev = lm.config._attn_implementation
    lm.config._attn_implementation = "eager"

    def eager(body, q):
        text = wrap(body)
        enc = tok(text, return_offsets_mapping=True, add_special_tokens=not text.startswith(tok.bos_token))  # as answered
        ids = enc["input_ids"]
        q0 = next(i for i, (s, e) in enumerate(enc["offset_mapping"]) if e > text.rindex(q))
        with torch.no_grad():
            att = lm(input_ids=torch.tensor([ids]), output_attentions=True).attentions  # L x (1, H, P, P)
        return torch.stack([a[0, :, q0:, :] for a in att]), q0  # (L, H, Q, P)

    try:
        rows, q0 = eager(p.body, p.question)
        null_body = p.body[: len(p.body) - len(p.question)] + "where is the ?"
        null_rows, nq0 = eager(null_body, "where is the ?")
    finally:
        lm.config._attn_implementation = prev
    ids, (s, e) = text_heads.needle_span(tok, wrap(p.body), p.needle)
    assert q0 == nq0 and e <= q0  # the needle lies before the question, shared by both prompts
    want = qrhead_sample(rows, list(range(s, e)), list(range(rows.shape[2])), null_rows, list(range(s, e)),
                         list(range(null_rows.shape[2])))
    assert torch.allclose(torch.tensor(rec["qrhead"]), want, atol=1e-5)


def test_prompts_pair_and_bad_prompts_are_refused(organism_c):
    tok, wrap = text_heads.tokenizer_of(organism_c.processor), text_heads.chat_wrap(organism_c.processor)
    p = _prompts(organism_c, style="items", contexts=(40,), depths=(0.5,), lengths=(4,), needles=1, seed=3)[0]
    q = text_qrhead.query_prompts(tok, wrap, p.body, p.question, p.needle, "items")
    assert q["ids"][:q["q0"]] == q["null_ids"][:q["q0"]] and q["keys"][1] <= q["q0"]
    assert tok.decode(q["null_ids"][q["q0"]:]).startswith("where is the ?")
    with pytest.raises(ValueError, match="question is not the end of its prompt"):
        text_qrhead.query_prompts(tok, wrap, p.body + " x", p.question, p.needle, "items")


def test_a_published_set_as_cross_heads_is_masked_whole():
    scores = torch.arange(32.0).reshape(4, 8)
    cfg = TextHeadsSettings(model="m", out="o", seeds=(0,))
    conds, _ = text_heads._condition_sets(scores, None, 2, cfg, ((0, 1), (0, 2), (1, 3)), "qrhead", cross_whole=True)
    assert conds[1].label == "all3:cross" and len(conds[1].heads) == 3 and len(conds[2].heads) == 3
    conds, _ = text_heads._condition_sets(scores, None, 2, cfg, ((0, 1), (0, 2), (1, 3)))
    assert conds[1].label == "top2:cross" and len(conds[1].heads) == 2


def test_sentences_with_the_null_query_na_on_a_tiny_qwen2_5_vl(tmp_path, tiny_checkpoint):
    from vrh.models.loading import load_model

    lm = load_model(tiny_checkpoint)
    res = text_heads.run_text_heads(TextHeadsSettings(model=tiny_checkpoint, contexts=(120,), depths=(0.5,), needles=2,
                                                      k=1, seeds=(0,), max_new_tokens=4, text_scorer="qrhead",
                                                      out=str(tmp_path / "t")), lm)
    hs = runs.read_head_scores(tmp_path / "t")
    assert res["scorer"] == "qrhead" and hs.n_scored == 2 and hs.scores("qrhead").shape == (lm.num_layers, lm.num_heads)
    tok, wrap = text_heads.tokenizer_of(lm.processor), text_heads.chat_wrap(lm.processor)
    p = _prompts(lm, style="sentences", contexts=(120,), depths=(0.5,), lengths=(4,), needles=1)[0]
    q = text_qrhead.query_prompts(tok, wrap, p.body, p.question, p.needle, "sentences")
    assert tok.decode(q["null_ids"][q["q0"]:]).strip().startswith("N/A") and q["ids"][:q["q0"]] == q["null_ids"][:q["q0"]]
    assert tok.decode(q["ids"][q["q0"]:]).strip().startswith(p.question)
