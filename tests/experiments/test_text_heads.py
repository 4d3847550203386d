"""``vrh text-heads`` on the shipped organism C (vrh.experiments.text_heads): run folder, scores, causal test, resume."""

import json
import os

import pytest
import torch

from vrh import runs
from vrh.cli import main
from vrh.experiments import text_heads
from vrh.experiments.settings import TextHeadsSettings
from vrh.scoring.copy_paste import copy_paste_sample

FAST = dict(model="organism:organism_c", haystack="items", contexts=(40,), depths=(0.0, 0.5), needles=2, seeds=(0,),
            k=2, max_new_tokens=12)


@pytest.fixture(scope="module")
def organism_c():
    from vrh.models.loading import load_model

    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    return load_model("organism:organism_c")


@pytest.fixture(scope="module")
def text_run(tmp_path_factory, organism_c):
    out = tmp_path_factory.mktemp("text") / "run"
    res = text_heads.run_text_heads(TextHeadsSettings(out=str(out), **FAST), organism_c)
    return out, res


def test_run_folder_scores_and_causal_test(text_run):
    out, res = text_run
    hs = runs.read_head_scores(out)
    recs = runs.read_samples(out)
    none = [r for r in recs if r["condition"] == "none"]
    assert hs.scorer == "copy_paste" and (hs.num_layers, hs.num_heads) == (4, 8) and len(none) == res["n"] == 4
    kept = [torch.tensor(r["copy_paste"]) for r in none if r["outcome"] == "correct"]
    assert hs.n_scored == res["n_correct"] == len(kept)
    if kept:  # the map is the mean over exactly recalled needles (the reference's filter, judged exactly)
        assert torch.allclose(hs.scores(), torch.stack(kept).mean(0), atol=1e-6)
    top = [c for c in res["conditions"] if c["condition"] == "top2:text"][0]
    assert [tuple(h) for h in top["heads"]] == sorted(hs.ranking()[:2])
    rnd = [c for c in res["conditions"] if c["kind"] == "random"]
    assert len(rnd) == 1 and not {tuple(h) for h in rnd[0]["heads"]} & {tuple(h) for h in top["heads"]}
    assert sum(r["condition"] == "top2:text" for r in recs) == 4
    assert res["recall_chance"] == pytest.approx(sum(1 / (r["units"] + 1) for r in none) / 4)
    assert res["copied_other_item"] == sum(r["copied_other"] for r in none) / 4
    assert not any(r["copied_other"] and r["outcome"] == "correct" for r in recs)
    cfg = runs.read_config(out)
    assert cfg["detect_ids"] == [r["id"] for r in none] and cfg["eval_ids"] == []  # a head source for sweep/evaluate


def test_scores_are_the_copy_paste_criterion_on_the_captured_rows(text_run, organism_c):
    """The score of one test recomputed from an eager teacher-forced forward over prompt + answer."""
    out, _ = text_run
    recs = [r for r in runs.read_samples(out) if r["condition"] == "none"]
    i = next(i for i, r in enumerate(recs) if torch.tensor(r["copy_paste"]).max() > 0)  # a test with copies
    rec = recs[i]
    tok = text_heads.tokenizer_of(organism_c.processor)
    p = text_heads.build_prompts(lambda t: len(text_heads.encode(tok, t)), style="items", contexts=(40,),
                                 depths=(0.0, 0.5), lengths=(4,), needles=2, seed=0,
                                 wrap=text_heads.chat_wrap(organism_c.processor))[i]
    ids, span = text_heads.needle_span(tok, text_heads.chat_wrap(organism_c.processor)(p.body), p.needle)
    out_ids, text, _ = text_heads.answer(organism_c, ids, 12)
    assert text == rec["pred_text"] and list(span) == rec["needle_span"]
    full = torch.tensor([ids + out_ids.tolist()])  # (1, P + A)
    lm = organism_c.model.model.language_model
    prev = lm.config._attn_implementation
    lm.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            att = lm(input_ids=full, output_attentions=True).attentions  # L x (1, H, N, N)
    finally:
        lm.config._attn_implementation = prev
    P, A = len(ids), len(out_ids)
    rows = torch.stack([a[0, :, P - 1:P - 1 + A, :] for a in att])  # (L, H, A, N)
    assert torch.allclose(copy_paste_sample(rows, full[0], out_ids, span), torch.tensor(rec["copy_paste"]), atol=1e-6)


def test_resume_recomputes_nothing_that_finished(text_run, organism_c, monkeypatch):
    out, res = text_run
    monkeypatch.setattr(text_heads, "answer", lambda *a, **k: pytest.fail("a finished test was answered again"))
    again = text_heads.run_text_heads(TextHeadsSettings(out=str(out), resume=True, **FAST), organism_c)
    assert {k: v for k, v in again.items() if k != "elapsed_seconds"} == \
        {k: v for k, v in res.items() if k != "elapsed_seconds"}


def test_bad_inputs_are_one_line_errors(tmp_path, capsys):
    rc = main(["text-heads", "--model", "organism:organism_c", "--haystack", "sentences", "--contexts", "60",
               "--out", str(tmp_path / "a")])
    assert rc == 2 and "does not have the words" in capsys.readouterr().err  # English on a word-level organism
    rc = main(["text-heads", "--model", "organism:organism_c", "--haystack", "items", "--cross-heads",
               "paper:Qwen2.5-VL-7B/RefCOCO", "--out", str(tmp_path / "b")])
    assert rc == 2 and "this model has 4 layers x 8 heads" in capsys.readouterr().err
    rc = main(["text-heads", "--model", "organism:organism_c", "--haystack", "items", "--k", "0",
               "--out", str(tmp_path / "d")])
    assert rc == 2 and "--k must be >= 1" in capsys.readouterr().err
    rc = main(["text-heads", "--model", "organism:organism_c", "--haystack", "items", "--contexts", "300",
               "--out", str(tmp_path / "c")])
    assert rc == 2 and "exceed the model's 256 positions" in capsys.readouterr().err


def test_the_result_line_gives_recalls_in_percent(tmp_path, organism_c, capsys):
    """Accuracies and recalls print as percentages on stdout, as in demo, sweep and compare (issue 46 item 9)."""
    out = tmp_path / "run"
    capsys.readouterr()
    res = text_heads.run_text_heads(TextHeadsSettings(out=str(out), **FAST), organism_c)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    assert line.startswith(f"text-heads: needle recall {pct(res['recall'])}, top-2 text heads masked "
                           f"{pct(res['text_heads_recall'])}, random {pct(res['random_recall_mean'])} -> "), line


def test_cross_heads_are_masked_and_random_heads_avoid_both(tmp_path, organism_c):
    res = text_heads.run_text_heads(TextHeadsSettings(out=str(tmp_path / "x"), cross_heads="0:5,1:1,3:7", **FAST),
                                    organism_c)
    cross = [c for c in res["conditions"] if c["condition"].endswith(":cross")][0]
    assert cross["heads"] == [[0, 5], [1, 1]] and res["cross_heads_recall"] == cross["recall"]  # its first k = 2
    banned = {(0, 5), (1, 1), *map(tuple, res["conditions"][0]["heads"])}
    assert not {tuple(h) for c in res["conditions"] if c["kind"] == "random" for h in c["heads"]} & banned
    assert json.loads((tmp_path / "x" / "results.json").read_text())["cross_heads"] == "0:5,1:1,3:7"


def test_sentences_on_a_tiny_qwen2_5_vl_with_its_chat_template(tmp_path, tiny_checkpoint):
    """The English haystack through a real processor's chat template and byte-level tokenizer: the needle span
    covers exactly the needle's characters, and the run folder is complete (random weights recall nothing)."""
    from vrh.models.loading import load_model

    lm = load_model(tiny_checkpoint)
    tok = text_heads.tokenizer_of(lm.processor)
    wrap = text_heads.chat_wrap(lm.processor)
    assert wrap("hi") != "hi\nAnswer:" and "hi" in wrap("hi")  # the processor's own template
    p = text_heads.build_prompts(lambda t: len(text_heads.encode(tok, t)), style="sentences", contexts=(120,),
                                 depths=(0.5,), lengths=(3,), needles=1, wrap=wrap)[0]
    ids, (s, e) = text_heads.needle_span(tok, wrap(p.body), p.needle)
    assert tok.decode(ids[s:e]).strip() == p.needle
    res = text_heads.run_text_heads(TextHeadsSettings(model=tiny_checkpoint, contexts=(120,), depths=(0.5,),
                                                      needles=2, k=1, seeds=(0,), max_new_tokens=4,
                                                      out=str(tmp_path / "t")), lm)
    assert res["n"] == 2 and (tmp_path / "t" / "head_scores.json").exists()


def test_a_text_heads_run_is_a_head_source_for_the_grounding_commands(text_run, organism_c, tmp_path):
    """vrh sweep masks the text run's top-k heads on grounding (the other half of the cross-masking question)."""
    from vrh.analyses import sweep
    from vrh.organism.world import write_split

    out, _ = text_run
    data = write_split(tmp_path / "world", 4, seed=20_000)
    res = sweep.run(sweep.Config(model="organism:organism_c", data=str(data), heads=str(out), ks=(0, 2), seeds=(0,),
                                 max_new_tokens=24, out=str(tmp_path / "sweep")), organism_c)
    masked = [c for c in res["conditions"] if c.get("k") == 2 and c.get("kind") == "top_k"]
    assert masked and sorted(map(tuple, masked[0]["heads"])) == sorted(runs.read_head_scores(out).ranking()[:2])


def test_the_default_haystack_is_one_the_tokenizer_has_the_words_of(organism_c, tiny_checkpoint, capsys):
    """organism C's word-level vocabulary has no English: its default haystack failed (issue 46 item 13)."""
    from vrh.models.loading import load_model

    cfg = TextHeadsSettings(**{**FAST, "haystack": None, "contexts": (120,)}, out="unused")
    assert text_heads.resolve_haystack(organism_c, cfg).haystack == "items"
    assert "text-heads: --haystack items (the tokenizer lacks words of 'sentences': " in capsys.readouterr().err
    qwen = load_model(tiny_checkpoint)
    cfg = TextHeadsSettings(**{**FAST, "model": tiny_checkpoint, "haystack": None, "contexts": (200,)}, out="unused")
    assert text_heads.resolve_haystack(qwen, cfg).haystack == "sentences"
    assert "--haystack sentences" in capsys.readouterr().err
    assert text_heads.resolve_haystack(organism_c, TextHeadsSettings(**FAST, out="u")).haystack == "items"  # given


def test_a_top_k_through_tied_scores_is_said(tmp_path, organism_c, capsys):
    """Issue 46 item 4, on the text side: a few recalled needles leave most heads at exactly 0, and a top-20 of
    32 then masks zero-score heads picked by (layer, head) order."""
    res = text_heads.run_text_heads(TextHeadsSettings(out=str(tmp_path / "t"), **{**FAST, "k": 20}), organism_c)
    scores = runs.read_head_scores(tmp_path / "t").scores()
    zeros = int((scores == 0).sum())
    assert res["n_correct"] > 0 and zeros > 32 - 20  # the premise: the cut falls among the zeros
    err = capsys.readouterr().err
    assert f"--k 20: the top-20 text heads cut through {zeros} heads tied at score 0" in " ".join(err.split())
