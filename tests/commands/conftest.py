"""One detection run on the tiny checkpoint shared by the command tests that only read it.

Package scope: detection is the slow part. Built through the detect command (not the CLI), so the
fixture does not depend on argument parsing.
"""

import os

import pytest

from vrh import runs

SCORERS = ("out/sum/mean", "rand1/sum/mean")
FAST = dict(max_new_tokens=8, batch_size=4)


@pytest.fixture(scope="package")
def tiny_lm(tiny_checkpoint):
    from vrh.models.loading import load_model

    return load_model(tiny_checkpoint)


@pytest.fixture(scope="package")
def det_run(tmp_path_factory, tiny_checkpoint, tiny_dataset, tiny_lm):
    from vrh.analyses import detect

    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    out = tmp_path_factory.mktemp("det") / "det"
    detect.run(detect.Config(model=tiny_checkpoint, data=tiny_dataset, n=6, n_eval=4, scorers=SCORERS, out=str(out),
                             **FAST), tiny_lm)
    assert (out / runs.HEAD_SCORES).exists() and (out / runs.SAMPLE_SCORES).exists()
    return out


@pytest.fixture
def crash_after(monkeypatch):
    """``restore = crash_after(n)``: answering the (n+1)-th batch raises KeyboardInterrupt (a run killed
    mid-way, after n batches were judged and appended); ``restore()`` puts the real function back."""
    import vrh.experiments.evaluation

    real = vrh.experiments.evaluation.answer_and_judge

    def install(n: int):
        calls = {"n": 0}

        def crashing(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] > n:
                raise KeyboardInterrupt("simulated crash")
            return real(*args, **kwargs)

        monkeypatch.setattr(vrh.experiments.evaluation, "answer_and_judge", crashing)
        return lambda: monkeypatch.setattr(vrh.experiments.evaluation, "answer_and_judge", real)

    return install
