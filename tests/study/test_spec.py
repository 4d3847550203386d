"""The study file: every refusal comes before any model loads and names the line of the study file."""

import re

import pytest

from vrh.study.spec import StudyError, line_of, load_study

from .conftest import write_study


def _line(err: StudyError) -> int:
    return int(re.match(r"^.*?:(\d+): ", str(err)).group(1))


def _line_with(path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def test_the_small_study_reads_with_grids_from_the_configs_and_its_pairs(tmp_path):
    s = load_study(write_study(tmp_path))
    assert [m.name for m in s.models] == ["A", "B"] and s.grids == {"A": (4, 8), "B": (4, 8)}
    assert s.pairs == (("A", "B"),)
    assert [b.name for b in s.benchmarks] == ["world", "world_refcoco"] and s.vqa[0].task == "vqa"
    assert s.protocol["sweep"].ks == [0, 2] and s.protocol["detection"].n == 6



def test_each_table_is_a_frozen_value_recorded_as_the_dict_the_study_has_always_recorded(tmp_path):
    """config.json's ``protocol`` (and so what a resumed study compares) is each table's defaults, then the
    keys written that have none, in the file's order: the record keeps that dict, order included."""
    import dataclasses
    import tomllib

    from vrh.options import GenerationOptions, ModelOptions
    from vrh.study.cells import study_tables
    from vrh.study.spec import RunSettings

    path = write_study(tmp_path, extra="\n[dpo_pairs]\nmodels = [\"A\"]\nk = 2\n")
    s, raw = load_study(path), tomllib.loads(path.read_text())
    for name, table in s.protocol.items():
        old = {**study_tables()[name].defaults, **raw.get(name, {})}
        assert list(table.record().items()) == list(old.items()), name
    assert list(s.protocol["dpo_pairs"].record()) == ["k", "n", "models"]
    assert s.protocol["sweep"].models is None and s.protocol["dpo_pairs"].benchmark is None  # not written
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.protocol["sweep"].ks = [1]
    assert s.run == RunSettings(device=ModelOptions.device, dtype=ModelOptions.dtype, batch_size=8,
                                max_new_tokens=24, threads=ModelOptions.threads)
    assert GenerationOptions.max_new_tokens != 24  # the file's value, not the default


@pytest.mark.parametrize("extra, where, says", [
    ("\n[sweep2]\nks = [1]\n", "[sweep2]", "unknown table [sweep2]"),
    ("\n[dpo_pairs]\nk = 2\nmodles = [\"A\"]\n", "modles", "unknown key 'modles'"),
    ("\n[dpo_pairs]\nk = 20\n", "k = 20", "no room for 20 random heads"),
    ("\n[dpo_pairs]\nk = 2\nbenchmark = \"refcoco\"\n", "benchmark = \"refcoco\"", "'refcoco' is not one of"),
    ("\n[benchmarks.mine]\ndata = \"nowhere/data.jsonl\"\n", "nowhere/data.jsonl", "does not exist"),
    ("\n[benchmarks.snap]\nsource = \"refcoco\"\nsnapshot = \"no_such_folder\"\n", "no_such_folder",
     "does not exist"),
    ("\n[benchmarks.bad]\nsource = \"nosuch\"\nsnapshot = \".\"\n", "\"nosuch\"", "unknown data source"),
    ("\n[benchmarks.both]\nworld = \"grounding\"\ndata = \"x.jsonl\"\nn = 3\nseed = 1\n", "[benchmarks.both]",
     "exactly one of"),
])
def test_a_bad_study_is_refused_with_its_line(tmp_path, extra, where, says):
    path = write_study(tmp_path, extra=extra)
    with pytest.raises(StudyError) as e:
        load_study(path)
    assert says in str(e.value) and _line(e.value) == _line_with(path, where), str(e.value)


def test_an_undrawable_k_in_a_list_names_the_list_line(tmp_path):
    path = write_study(tmp_path, ks="[0, 2, 17]")  # 17 top + 17 random > 32 heads
    with pytest.raises(StudyError, match=r"sweep.ks 17: no room for 17 random heads") as e:
        load_study(path)
    assert _line(e.value) == _line_with(path, "ks = [0, 2, 17]")


def test_a_missing_model_folder_and_a_detection_larger_than_a_benchmark_are_refused(tmp_path):
    path = write_study(tmp_path)
    path.write_text(path.read_text().replace('A = "organism:organism_a"', 'A = "./no_checkpoint"'))
    with pytest.raises(StudyError, match="does not exist") as e:
        load_study(path)
    assert _line(e.value) == _line_with(path, "no_checkpoint")
    path = write_study(tmp_path, n_world=6)  # detection n = 6 leaves nothing held out
    with pytest.raises(StudyError, match="leaves no held-out samples in benchmark 'world'") as e:
        load_study(path)
    det = _line_with(path, "[detection]")
    assert _line(e.value) == det + 1 and path.read_text().splitlines()[det] == "n = 6"


def test_auto_pairs_are_the_models_with_one_lm_config_and_vocabulary(tmp_path):
    """All four organisms have one LM config and tokenizer (A and C share no weights): "auto" pairs them
    all, which is why the shipped example lists its pairs."""
    path = write_study(tmp_path)
    text = path.read_text().replace('pairs = [["A", "B"]]', 'pairs = "auto"')
    text = text.replace('B = { model = "organism:organism_b" }',
                        'B = { model = "organism:organism_b" }\nC = "organism:organism_c"')
    path.write_text(text)
    s = load_study(path)
    assert s.pairs == (("A", "B"), ("A", "C"), ("B", "C"))  # both_directions = false


def test_line_of_finds_keys_in_tables_and_inline_tables():
    text = "[study]\nname = 'x'\n\n[models]\nA = 'a'\nB = { model = 'b' }\n[sweep]\nks = [1]\n"
    assert line_of(text, ("models", "B", "model")) == 6
    assert line_of(text, ("sweep", "ks")) == 8
    assert line_of(text, ("sweep", "seeds")) == 7  # not written: the table's header
    assert line_of(text, ("transfer",)) == 1


def test_the_shipped_example_study_reads(tmp_path):
    from pathlib import Path

    from vrh.study.kinds import build_cells

    example = Path(__file__).resolve().parents[2] / "examples" / "organism_study.toml"
    s = load_study(example)
    assert [m.name for m in s.models] == ["A", "B", "C", "C_prime"]
    assert s.pairs == (("A", "B"), ("C", "C_prime"), ("B", "A"), ("C_prime", "C"))
    kinds = {c.kind for c in build_cells(s)}
    assert kinds == {"data", "detect", "sweep", "crosstask", "compare", "transfer", "stability"}


@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a = ", "}")])
def test_a_deeply_nested_value_is_one_error_naming_the_file_and_line(tmp_path, capsys, opening, closing):
    """100,000 nested arrays or inline tables: tomllib's RecursionError became a traceback (issue 33 item 8)."""
    from vrh.cli import main

    path = write_study(tmp_path)
    path.write_text(path.read_text().replace("max_new_tokens = 24", "max_new_tokens = 24\nthreads = "
                                             + opening * 100_000 + "1" + closing * 100_000))
    with pytest.raises(StudyError, match="values nested too deeply") as e:
        load_study(path)
    assert str(e.value).startswith(f"{path}:") and _line(e.value) == _line_with(path, "threads = ")
    assert main(["study", "plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"vrh study: error: {path}:") and "Traceback" not in err


def test_deep_line_skips_strings_and_comments():
    from vrh.study.spec import deep_line

    text = "a = '[[[[[[' # [[[[[[\nb = \"\"\"\n[[[[[[\n\"\"\"\nc = [[[[[[1]]]]]]\n"
    assert deep_line(text, limit=5) == 5 and deep_line(text, limit=6) is None
