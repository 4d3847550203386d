"""Data-parallel runs (vrh.infra.distributed): two CPU processes on gloo under ``python -m torch.distributed.run``
write the run folder one process writes, and a rerun after a crash skips what any shard finished."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from vrh import runs
from vrh.infra import distributed
from vrh.cli import main
from vrh.infra.distributed import World, my_batches

ENV = {**os.environ, "VRH_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}


def _torchrun(args, n=2, progress=False):
    # "--" ends torchrun's own options: its parser would take vrh's --n for an abbreviation of --nnodes
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n),
           "-m", "vrh", "--", *args]
    env = {k: v for k, v in ENV.items() if not (progress and k == "VRH_NO_PROGRESS")}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_batches_are_strided_over_ranks_and_cover_every_item_once():
    parts = [my_batches(11, 3, World(rank=r, size=3)) for r in range(3)]
    assert [[b for b, _, _ in p] for p in parts] == [[0, 3], [1], [2]]
    covered = sorted(i for p in parts for _, start, stop in p for i in range(start, stop))
    assert covered == list(range(11))
    with pytest.raises(ValueError, match="batch_size"):
        my_batches(3, 0, World())


def test_a_command_without_data_parallel_support_is_refused(monkeypatch):
    from vrh.analyses import compare, evaluate
    from vrh.experiments.setup import check_data_parallel

    monkeypatch.setattr(distributed, "_WORLD", World(rank=0, size=2))
    with pytest.raises(ValueError, match="vrh compare does not run data-parallel"):
        check_data_parallel(compare.Config(model="m", data="d", out="o"))
    check_data_parallel(evaluate.Config(model="m", data="d", out="o"))  # supported: no error


def _detect_args(ckpt, data):
    return ["detect", "--model", ckpt, "--data", data, "--n", "7", "--n-eval", "4", "--batch-size", "2",
            "--max-new-tokens", "6", "--threads", "1", "--scorers", "out/sum/mean,rand1/sum/mean"]


def test_two_process_detect_equals_one_process(tmp_path, tiny_checkpoint, tiny_dataset):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*_detect_args(tiny_checkpoint, tiny_dataset), "--out", str(one)]) == 0
    _torchrun([*_detect_args(tiny_checkpoint, tiny_dataset), "--out", str(two)])
    a, b = runs.read_json(one / runs.HEAD_SCORES), runs.read_json(two / runs.HEAD_SCORES)
    a.pop("elapsed_seconds"), b.pop("elapsed_seconds")
    assert a == b and a["n_scored"] == 7
    for name in (runs.SAMPLE_SCORES, runs.OVERLAYS):
        with np.load(one / name) as x, np.load(two / name) as y:
            assert x.files == y.files and all(np.array_equal(x[k], y[k]) for k in x.files)
    assert runs.read_samples(one) == runs.read_samples(two)  # merged in sample order
    assert sorted(p.name for p in one.iterdir()) == sorted(p.name for p in two.iterdir())  # no shards, no state


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_accelerate_launch_detect_equals_one_process(tmp_path, tiny_checkpoint, tiny_dataset):
    """``accelerate launch --multi_gpu --num_processes 2 -m vrh detect`` (accelerate hands the processes to
    torch's launcher; on a CPU machine they join gloo) writes the run folder one process writes."""
    pytest.importorskip("accelerate")
    one, two = tmp_path / "one", tmp_path / "two"
    args = _detect_args(tiny_checkpoint, tiny_dataset)
    assert main([*args, "--out", str(one)]) == 0
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
           "-m", "vrh", *args, "--out", str(two)]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count("detect: 7 samples scored") == 1  # the summary once, from rank 0
    assert done.stderr.count("model: ") == 1 and done.stdout.count("detect: top") == 1  # note and result once
    a, b = runs.read_json(one / runs.HEAD_SCORES), runs.read_json(two / runs.HEAD_SCORES)
    a.pop("elapsed_seconds"), b.pop("elapsed_seconds")
    assert a == b and runs.read_samples(one) == runs.read_samples(two)
    assert sorted(p.name for p in one.iterdir()) == sorted(p.name for p in two.iterdir())  # no shards, no state


def test_two_process_evaluate_resumes_every_shard_and_equals_one_process(tmp_path, tiny_checkpoint, tiny_dataset):
    """An interrupted 2-process run is planted (two rank shards, results.json missing); the 2-process rerun
    with --resume keeps every finished record (marked) and generates only the rest; the merged folder
    equals a 1-process run's."""
    base = ["evaluate", "--model", tiny_checkpoint, "--data", tiny_dataset, "--task", "vqa", "--no-disjoint",
            "--mask-heads", "0:1,1:0", "--batch-size", "2", "--max-new-tokens", "4", "--threads", "1"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main([*base, "--out", str(one)]) == 0
    full = runs.read_samples(one)
    assert len(full) == 12

    two.mkdir()
    cfg = runs.read_json(one / runs.CONFIG)
    runs.write_json(two / runs.CONFIG, {**cfg, "config": {**cfg["config"], "out": str(two)}})
    kept = {0: full[0:2], 1: full[2:4] + full[6:7]}  # what each rank had appended when it was killed
    for rank, recs in kept.items():
        (two / runs.shard_name(rank, 2)).write_text("".join(json.dumps({**r, "kept": True}) + "\n" for r in recs))
    done = _torchrun([*base, "--out", str(two), "--resume"], progress=True)
    # rank 0 alone shows progress (two ranks' lines would interleave), counting the rows it generated: its
    # share of the 7 not kept
    totals = [int(m) for m in re.findall(r"evaluate: \d+/(\d+) generations \(100%\)", done.stderr)]
    assert len(totals) == 1 and totals[0] in (3, 4), done.stderr[-2000:]

    merged = runs.read_samples(two)
    assert not list(two.glob(runs.SHARD_GLOB))
    assert sorted(r["id"] for r in merged) == sorted(r["id"] for r in full)  # each sample once
    assert {r["id"] for r in merged if r.get("kept")} == {r["id"] for recs in kept.values() for r in recs}
    strip = lambda rs: sorted((json.dumps({k: v for k, v in r.items() if k != "kept"}, sort_keys=True)  # noqa: E731
                               for r in rs))
    assert strip(merged) == strip(full)
    a, b = runs.read_results(one), runs.read_results(two)
    a.pop("elapsed_seconds"), b.pop("elapsed_seconds")
    assert a == b
