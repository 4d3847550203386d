"""The answer-format probe's library (vrh.experiments.format_probe) on the shipped organism: its own format reads
its answers, frames it does not write do not, and variants with one prompt share one generation."""

import json

import pytest

from vrh.experiments import format_probe as fp

N = 12


@pytest.fixture(scope="module")
def organism():
    from vrh.models.loading import load_model

    return load_model("organism")


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    from vrh.data import load_dataset
    from vrh.organism.world import write_split

    return list(load_dataset(write_split(tmp_path_factory.mktemp("world"), N, seed=123)))


@pytest.fixture
def mine(tmp_path):
    """The organism's own prompt with two frames it does not answer in."""
    f = tmp_path / "mine.json"
    f.write_text(json.dumps([{"name": "own_norm1", "box": "norm1", "about": "organism prompt, 0-1 read"},
                             {"name": "own_norm1000", "box": "norm1000"}]))
    return str(f)


def test_the_probed_variants_are_the_familys_then_the_shared_then_the_users(organism, mine):
    names = lambda vs: [(f.name, origin) for f, origin in vs]  # noqa: E731
    family = [("native", "family"), ("pixels", "family"), ("norm1", "family"), ("norm1000", "family")]
    assert names(fp.probe_variants(organism.adapter)) == family
    with_shared = names(fp.probe_variants(organism.adapter, shared_too=True))
    assert with_shared[:4] == family and {n for n, o in with_shared[4:]} == {"resized", "norm999", "json_pixels",
                                                                             "json_resized", "json_norm1000"}
    assert names(fp.probe_variants(organism.adapter, mine))[4:] == [("own_norm1", mine), ("own_norm1000", mine)]


def test_a_users_variant_may_not_take_a_probed_name(organism, tmp_path):
    f = tmp_path / "clash.json"
    f.write_text(json.dumps([{"name": "pixels", "box": "norm1"}]))
    with pytest.raises(ValueError, match=r"\['pixels'\] already name variants"):
        fp.probe_variants(organism.adapter, str(f))


def test_the_organisms_own_format_reads_its_answers_and_other_frames_do_not(organism, samples, mine, monkeypatch):
    import vrh.models.generation

    calls = []
    real = vrh.models.generation.generate_answers

    def counting(lm, images, prompts, **kw):
        calls.append(tuple(prompts))
        return real(lm, images, prompts, **kw)

    monkeypatch.setattr(vrh.models.generation, "generate_answers", counting)
    variants = [v for v in fp.probe_variants(organism.adapter, mine) if v[0].name in ("native", "own_norm1",
                                                                                      "own_norm1000", "norm1")]
    res = {r.name: r for r in fp.probe_formats(organism, samples, variants, batch_size=N, max_new_tokens=24)}
    native, norm1, norm1000 = res["native"], res["own_norm1"], res["own_norm1000"]
    assert native.n == N and native.parse_rate >= 0.9 and native.accuracy >= 0.75  # measured: 1.0 and 0.92
    assert native.prompt == "where is {expression} ?" and native.box == "native"
    # the same answers read in frames the organism does not write: no 0-1 box, and 0-1000 boxes far too small
    assert norm1.example == norm1000.example == native.example
    assert norm1.parsed == 0 and norm1.correct == 0
    assert norm1000.parsed == native.parsed and norm1000.correct == 0
    assert res["norm1"].prompt.startswith("Locate {expression} in the image.") and res["norm1"].correct == 0
    # one generation per distinct prompt: the organism's own (3 variants) and the shared norm1 one
    assert len(calls) == 2 and len(set(calls)) == 2


def test_the_best_variant_is_the_most_accurate_then_the_best_parsed():
    row = lambda name, parsed, correct: fp.VariantResult(name, "family", None, "native", 10, parsed, correct, "")  # noqa: E731
    probe = fp.FormatProbe(model={}, data={}, tau=0.5, variants=[row("a", 9, 2), row("b", 5, 4), row("c", 8, 4)])
    assert probe.best.name == "c"
    out = probe.to_json()
    assert out["best"] == "c" and out["variants"][1]["parse_rate"] == 0.5 and out["variants"][1]["accuracy"] == 0.4
    assert fp.FormatProbe(model={}, data={}, tau=0.5).best is None


@pytest.fixture(scope="module")
def world_file(tmp_path_factory):
    from vrh.organism.world import write_split

    return str(write_split(tmp_path_factory.mktemp("world_eval"), N, seed=7))


def test_a_run_where_no_answer_held_a_box_says_so_on_stdout(organism, world_file, tmp_path, capsys):
    """The organism asked to answer 0-1 fractions writes pixel boxes: every answer fails to parse, and evaluate
    printed only "accuracy 0.0%" (issue 46 item 12)."""
    from vrh.analyses import evaluate

    evaluate.run(evaluate.Config(model="organism", data=world_file, out=str(tmp_path / "norm1"), n=6,
                                 answer_format="norm1", max_new_tokens=24), organism)
    out = capsys.readouterr().out
    assert "evaluate: every answer failed to parse (6 of 6 held no box in the 'norm1' answer format)" in out
    assert "vrh probe-format --model" in out and "--answer-format NAME" in out
    evaluate.run(evaluate.Config(model="organism", data=world_file, out=str(tmp_path / "native"), n=6,
                                 max_new_tokens=24), organism)
    assert "failed to parse" not in capsys.readouterr().out


def test_the_never_parsed_line_only_for_all_failures(organism):
    assert fp.never_parsed_line("sweep", 5, 4, organism, "d.jsonl") is None
    assert fp.never_parsed_line("sweep", 0, 0, organism, "d.jsonl") is None
    assert fp.never_parsed_line("sweep", 5, 5, organism, "d.jsonl").startswith("sweep: every answer failed to parse")


def test_detect_and_sweep_say_it_too(organism, world_file, tmp_path, capsys):
    from vrh.analyses import detect, sweep

    detect.run(detect.Config(model="organism", data=world_file, out=str(tmp_path / "det"), n=4, n_eval=4,
                             answer_format="norm1", max_new_tokens=24, paper_model="none"), organism)
    assert "detect: every answer failed to parse (4 of 4" in capsys.readouterr().out
    sweep.run(sweep.Config(model="organism", data=world_file, out=str(tmp_path / "sw"), n=4, ks=(0, 1), seeds=(0,),
                           heads=str(tmp_path / "det"), max_new_tokens=24), organism)
    out = capsys.readouterr().out  # the heads' run's answer format travels: norm1 again
    assert "sweep: every answer failed to parse (4 of 4 held no box in the 'norm1' answer format)" in out
