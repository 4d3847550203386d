"""One detection run on the tiny checkpoint shared by the transfer / stability / dpo-pairs tests.

Package scope: detection is the slow part, and all three commands only read the run folder.
"""

import os

import pytest

from vrh import runs
from vrh.cli import main

SCORERS = "out/sum/mean,rand1/sum/mean"
FAST = ["--max-new-tokens", "8", "--batch-size", "4"]


@pytest.fixture(scope="package")
def det_run(tmp_path_factory, tiny_checkpoint, tiny_dataset):
    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    out = tmp_path_factory.mktemp("det") / "det"
    assert main(["detect", "--model", tiny_checkpoint, "--data", tiny_dataset, "--n", "6", "--n-eval", "4",
                 "--scorers", SCORERS, "--out", str(out), *FAST]) == 0
    assert (out / runs.HEAD_SCORES).exists() and (out / "sample_scores.npz").exists()
    return out
