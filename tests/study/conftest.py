"""A small study over organisms A and B (every cell kind, a few samples each) and one uninterrupted run of
it shared by the tests that only read it."""

import os
from pathlib import Path

import pytest

SMALL_STUDY = """\
[study]
name = "small"
batch_size = 8
max_new_tokens = 24

[models]
A = "organism:organism_a"
B = {{ model = "organism:organism_b" }}

[benchmarks.world]
world = "grounding"
n = {n_world}
seed = 20000

[benchmarks.world_refcoco]
world = "grounding"
layout = "refcoco"
n = 10
seed = 30000

[vqa.world_vqa]
world = "vqa"
n = 4
seed = 20001

[detection]
n = 6
scorers = ["out/sum/mean", "rand1/sum/mean"]

[sweep]
ks = {ks}
seeds = [0]
benchmarks = ["world", "world_refcoco"]

[crosstask]
k = 2
seeds = [0]

[compare]
ks = [2]
methods = ["out/sum/mean", "in/sum/mean", "retrieval_heads"]
n = 6
models = ["A"]

[transfer]
k = 2
seeds = [0]
pairs = [["A", "B"]]
both_directions = false

[stability]
k = 2
n_values = [1, 4]
bootstrap = 2
models = ["B"]
"""


def write_study(folder: Path, *, n_world: int = 12, ks: str = "[0, 2]", extra: str = "") -> Path:
    path = Path(folder) / "study.toml"
    path.write_text(SMALL_STUDY.format(n_world=n_world, ks=ks) + extra)
    return path


@pytest.fixture(scope="session")
def small_study(tmp_path_factory):
    """(study file, study folder) of one uninterrupted sequential run of the small study."""
    from vrh.study.execute import run_study
    from vrh.study.spec import load_study

    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    root = tmp_path_factory.mktemp("small_study")
    path = write_study(root)
    run_study(load_study(path), root / "out", log=lambda m: None)
    return path, root / "out"
