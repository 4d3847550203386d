"""Every value `vrh study run` would refuse is refused by `vrh study plan` first, before anything loads, as
`study.toml:LINE: ...` (issue 33 item 7)."""

import re

import pytest

from vrh.cli import main
from vrh.study.spec import StudyError, load_study

from .conftest import write_study


def _line(err) -> int:
    return int(re.match(r"^.*?\.toml:(\d+): ", str(err)).group(1))


def _line_with(path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


def _study(tmp_path, old: str, new: str):
    path = write_study(tmp_path)
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


SOURCE = '\n[benchmarks.src]\nsource = "refcoco"\nsnapshot = "."\n'

# (text replaced, its replacement, the line the refusal names, what it says)
BAD = [
    ("batch_size = 8", "batch_size = 0", "batch_size = 0", "study.batch_size: must be >= 1, got 0"),
    ("batch_size = 8", "batch_size = -4", "batch_size = -4", "study.batch_size: must be >= 1"),
    ("max_new_tokens = 24", "max_new_tokens = 0", "max_new_tokens = 0", "study.max_new_tokens: must be >= 1"),
    ("max_new_tokens = 24", "max_new_tokens = 24\nthreads = -1", "threads = -1", "study.threads: must be >= 1"),
    ("max_new_tokens = 24", 'max_new_tokens = 24\ndevice = "cuda:99; rm -rf /"', "rm -rf", "is not a torch device"),
    ("max_new_tokens = 24", 'max_new_tokens = 24\ndtype = "int8"', "int8", "study.dtype: 'int8': one of"),
    ("[detection]\nn = 6", "[detection]\nn = 0", "n = 0", "detection.n: must be >= 1, got 0"),
    ("[detection]\nn = 6", "[detection]\nn = -1", "n = -1", "detection.n: must be >= 1, got -1"),
    ("[detection]\nn = 6", "[detection]\nn = 6\nn_eval = -5", "n_eval = -5", "detection.n_eval: must be >= 1"),
    ("[detection]\nn = 6", "[detection]\nn = 6\nn_eval = 7", "n_eval = 7",
     "detection.n 6 + detection.n_eval 7 asks for more samples than benchmark 'world' has (12)"),
    ('benchmarks = ["world", "world_refcoco"]', 'benchmarks = ["world", "world_refcoco"]\nn = -1', "n = -1",
     "sweep.n: must be >= 1, got -1"),
    ("ks = [0, 2]", "ks = []", "ks = []", "sweep.ks: empty; give at least one k"),
    ("ks = [0, 2]", "ks = [0, [2]]", "ks = [0, [2]]", "sweep.ks: [2] in [0, [2]]: each must be an integer"),
    ('benchmarks = ["world", "world_refcoco"]', "benchmarks = []", "benchmarks = []",
     "sweep.benchmarks: empty; leave it out"),
    ("seeds = [0]\nbenchmarks", "seeds = [-1]\nbenchmarks", "seeds = [-1]", "sweep.seeds: -1 in [-1]"),
    ('pairs = [["A", "B"]]', 'pairs = [["A", "A"]]', 'pairs = [["A", "A"]]', "pairs a model with itself"),
    ('pairs = [["A", "B"]]', "pairs = []", "pairs = []", "transfer.pairs: empty"),
    ("n_values = [1, 4]", "n_values = [0, 4]", "n_values = [0, 4]", "stability.n_values: 0 in [0, 4]"),
    ("bootstrap = 2", "bootstrap = 0", "bootstrap = 0", "stability.bootstrap: must be >= 1"),
    ('methods = ["out/sum/mean", "in/sum/mean", "retrieval_heads"]\nn = 6',
     'methods = ["out/sum/mean", "in/sum/mean", "retrieval_heads"]\nn = 13', "n = 13",
     "compare.n 13 leaves no held-out samples in benchmark 'world'"),
    ("ks = [2]\nmethods", "ks = [0]\nmethods", "[compare]", "cell compare/A/world: --ks"),  # the command's own
    ("n = 12\nseed = 20000", "n = 1000000000\nseed = 20000", "n = 1000000000",
     "benchmarks.world.n: 1000000000 samples would write about 14 TB of synthetic images; at most 50000"),
    ('models = ["B"]\n', 'models = ["B"]\n' + SOURCE + "limit = -5\n", "limit = -5",
     "benchmarks.src.limit: must be >= 1, got -5"),
    ('models = ["B"]\n', 'models = ["B"]\n' + SOURCE.replace('"."', '"/"'), 'snapshot = "/"',
     "benchmarks.src.snapshot / is a filesystem root"),
    ('A = "organism:organism_a"', 'A = { model = "organism:organism_a", adapter = "no_such_file.py:Mine" }',
     "no_such_file", "adapter 'no_such_file.py:Mine': no file"),
    ('A = "organism:organism_a"', 'A = { model = "organism:organism_a", adapter = "nosuch" }', "nosuch",
     "adapter 'nosuch': no registered adapter"),
]


@pytest.mark.parametrize("old, new, where, says", BAD, ids=[b[2] for b in BAD])
def test_a_value_run_would_refuse_is_refused_when_read_with_its_line(tmp_path, old, new, where, says):
    path = _study(tmp_path, old, new)
    with pytest.raises(StudyError) as e:
        load_study(path)
    assert says in str(e.value) and _line(e.value) == _line_with(path, where), str(e.value)


def test_study_plan_refuses_it_as_one_line_and_writes_nothing(tmp_path, capsys):
    path = _study(tmp_path, "batch_size = 8", "batch_size = 0")
    assert main(["study", "plan", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    line = _line_with(path, "batch_size = 0")
    assert err == f"vrh study: error: {path}:{line}: study.batch_size: must be >= 1, got 0"
    assert not (tmp_path / "out").exists()


def test_a_device_this_machine_lacks_is_refused_by_run_with_its_line_and_noted_by_plan(tmp_path, capsys):
    """cuda:99: no machine this runs on has 100 GPUs (and a CPU-only torch has none)."""
    path = _study(tmp_path, "max_new_tokens = 24", 'max_new_tokens = 24\ndevice = "cuda:99"')
    assert main(["study", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vrh study: error: {path}:{_line_with(path, 'cuda:99')}: study.device cuda:99"), err
    assert not (tmp_path / "out").exists()
    assert main(["study", "plan", str(path)]) == 0  # a study may be planned where it will not run
    assert "note:" in capsys.readouterr().err


def test_text_from_the_file_in_an_error_cannot_steer_the_terminal(tmp_path):
    path = _study(tmp_path, 'models = ["B"]\n',
                  'models = ["B"]\n\n[benchmarks.mine]\ndata = "no\\u001b[2J\\u202ewhere.jsonl"\n')
    with pytest.raises(StudyError) as e:
        load_study(path)
    msg = str(e.value)
    assert "does not exist" in msg and "\x1b" not in msg and "\u202e" not in msg and "no\\x1b[2J\\u202ewhere" in msg


def test_a_long_value_is_quoted_cut(tmp_path):
    path = _study(tmp_path, "max_new_tokens = 24", 'max_new_tokens = 24\ndtype = "' + "x" * 5000 + '"')
    with pytest.raises(StudyError, match=r"study.dtype: 'xxx+\.\.\.: one of") as e:
        load_study(path)
    assert len(str(e.value)) < 200 + len(str(path))


def test_a_data_file_is_read_as_the_commands_read_it(tmp_path):
    """A converted dataset that is not one, or has no sample of its set's task, failed only when its first
    cell ran; a good one counts its samples of that task for the detection split."""
    from vrh.organism.world import write_split

    (tmp_path / "bad.jsonl").write_text('{"id": "x", "task": "grounding"}\n')
    path = _study(tmp_path, 'models = ["B"]\n', 'models = ["B"]\n\n[benchmarks.mine]\ndata = "bad.jsonl"\n')
    with pytest.raises(StudyError, match=r"benchmarks\.mine\.data: .*bad\.jsonl:1: missing field") as e:
        load_study(path)
    assert _line(e.value) == _line_with(path, 'data = "bad.jsonl"')
    grounding = write_split(tmp_path / "g", 7, 5, "grounding")  # 7 samples: detection n = 6 fits
    for section in ("benchmarks", "vqa"):
        path = _study(tmp_path, 'models = ["B"]\n', f'models = ["B"]\n\n[{section}.mine]\ndata = "{grounding}"\n')
        if section == "benchmarks":
            assert load_study(path).dataset("mine").data == str(grounding.resolve())
        else:
            with pytest.raises(StudyError, match="has no vqa samples") as e:
                load_study(path)
            assert _line(e.value) == _line_with(path, f'data = "{grounding}"')
