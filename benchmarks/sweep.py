"""What sharing the prompt work of a sample's rows saves in a k-sweep (issue 36): today's batched path (every
row runs the vision encoder and its whole prompt forward) vs the shared path (:mod:`vrh.core.sharing`: each
distinct image encoded once per batch, each row's prompt computed from its first masked layer), side by side
in one run, interleaved round by round; the ratio is the median of the per-round ratios.

Two workloads, both through :func:`vrh.experiments.runner.run_conditions` on grounding samples:

* ``organism``: the shipped organism on the demo's synthetic world, the demo sweep's shape (k = 0, 1, 3, 6;
  the top-k stand-in heads in the upper half of the LM, 3 random seeds per k anywhere);
* ``vlm``: a random-init LLaVA shaped like a 7B VLM's proportions: vision FLOPs about a third of the LM's
  prompt FLOPs, a long prompt (the visual tokens) against a short forced answer, the paper's sweep (k = 0, 1,
  5, 10, 20; top-k in the upper half, 3 random seeds per k anywhere); ``vrh_only`` times the unmasked + top-k
  rows alone.

Printed per workload: time ratio shared / today (wall clock, and this process's CPU time, which other jobs on
a shared CPU machine do not inflate; on CUDA the wall clock is the one to read), peak-memory ratio (CPU: peak
RSS above the level before, ``VmHWM`` reset through ``/proc/self/clear_refs``; CUDA: ``max_memory_allocated``),
and the fraction of rows whose prompt forward started above layer 0. The records of both paths are compared
(they must be equal). The last line is one JSON object::

    python benchmarks/sweep.py                  # CPU, small shapes
    python benchmarks/sweep.py --quick          # a smoke run (tests/test_benchmark_sweep.py)
    python benchmarks/sweep.py --device cuda --dtype bfloat16 --size 7b
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

SIZES = {  # LM layers, hidden, heads, kv heads; vision layers, hidden; image px (patch 14)
    "quick": dict(layers=4, hidden=64, heads=8, kv=2, v_layers=1, v_hidden=64, image=112),
    "small": dict(layers=8, hidden=256, heads=8, kv=2, v_layers=3, v_hidden=256, image=224),
    "7b": dict(layers=28, hidden=3584, heads=28, kv=4, v_layers=10, v_hidden=3584, image=812),
}


def vlm(size: str, dtype: torch.dtype, device: str):
    """A random-init LLaVA of ``size``: the vision tower's layers are about a third of the LM's at the same width,
    so with one visual token per patch the vision FLOPs are about a third of the prompt's LM FLOPs."""
    from vrh.models.adapters import get_adapter
    from vrh.models.loading import LoadedModel
    from vrh.testing.tiny_models import tiny_llava

    s = SIZES[size]
    text = dict(num_hidden_layers=s["layers"], hidden_size=s["hidden"], intermediate_size=s["hidden"] * 3,
                num_attention_heads=s["heads"], num_key_value_heads=s["kv"], head_dim=s["hidden"] // s["heads"],
                max_position_embeddings=8192)
    vision = dict(num_hidden_layers=s["v_layers"], hidden_size=s["v_hidden"], intermediate_size=s["v_hidden"] * 3,
                  num_attention_heads=max(1, s["v_hidden"] // 64), patch_size=14)
    model, processor = tiny_llava(seed=0, text_config=text, vision_config=vision, image_size=s["image"])
    model = model.to(device=device, dtype=dtype).eval()
    return LoadedModel(model, processor, get_adapter("llava"), f"llava-{size}")


def samples(root: Path, n: int, px: int):
    from PIL import Image, ImageDraw

    from vrh.data import Sample

    out = []
    for i in range(n):
        im = Image.new("RGB", (px, px), (240, 240, 240))
        ImageDraw.Draw(im).rectangle([8 + 5 * i, 10, px // 2, px // 2], fill=(200, 30, 30))
        im.save(root / f"im{i}.png")
        out.append(Sample(id=f"s{i}", image_path=root / f"im{i}.png", task="grounding", expression="the red box",
                          box=(8.0 + 5 * i, 10.0, px / 2, px / 2)))
    return out


def sweep_conditions(num_layers: int, num_heads: int, ks: list[int], seeds: int):
    """Unmasked, top-k stand-ins in the upper half (a fixed ranking there), and k random heads anywhere per seed."""
    from vrh.experiments import conditions as cond

    rng = random.Random(0)
    upper = [(layer, h) for layer in range(num_layers // 2, num_layers) for h in range(num_heads)]
    rng.shuffle(upper)
    vrh = [cond.none()] + [cond.explicit(upper[:k], label=f"top{k}") for k in ks if k > 0]
    rand = [c for k in ks if k > 0 for c in cond.random_controls(num_layers, num_heads, k, range(seeds)).conditions]
    return vrh, rand


def started_above_0(rows_heads: list[tuple[str, list]], batch_size: int, num_layers: int) -> float:
    from vrh.core.sharing import first_masked_layer, prefix_plan

    above = 0
    for start in range(0, len(rows_heads), batch_size):
        part = rows_heads[start:start + batch_size]
        plan = prefix_plan([g for g, _ in part], [first_masked_layer(h, num_layers) for _, h in part], num_layers)
        above += round(plan.started_above_0 * len(part))
    return above / len(rows_heads)


def _peak_start(device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_allocated()
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return _rss("VmRSS")
    except OSError:
        return float("nan")


def _peak_end(device: str, before: float) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    return (_rss("VmHWM") - before) / 2**20


def _rss(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1]) * 1024
    return float("nan")


def measure(lm, smp, conds, args) -> dict:
    from vrh.experiments.runner import run_conditions
    from vrh.tasks import get_task

    task = get_task("grounding")
    gen = dict(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, progress=False)
    times = {True: [], False: []}
    cpu = {True: [], False: []}  # this process's CPU seconds: what other jobs on a shared machine do not move
    mem = {True: 0.0, False: 0.0}
    results = {}
    warm = 0 if args.quick else 1  # rounds not timed
    for r in range(args.repeats + warm):
        for share in (False, True) if r % 2 == 0 else (True, False):
            before = _peak_start(args.device)
            t0, c0 = time.perf_counter(), time.process_time()
            res = run_conditions(lm, task, smp, conds, share_vision=share, share_prefix=share, **gen)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            mem[share] = max(mem[share], _peak_end(args.device, before))
            if r >= warm:
                times[share].append(dt)
                cpu[share].append(dc)
            results[share] = res.records
    if results[True] != results[False]:
        raise AssertionError("shared and unshared records differ")
    ratios = [a / b for a, b in zip(times[True], times[False])]
    rows = [(s.id, list(c.heads)) for s in smp for c in {c.key: c for c in conds}.values()]
    cpu_ratios = [a / b for a, b in zip(cpu[True], cpu[False])]
    return {"time_ratio": round(statistics.median(ratios), 3),
            "cpu_time_ratio": round(statistics.median(cpu_ratios), 3),
            "today_s": round(statistics.median(times[False]), 3), "shared_s": round(statistics.median(times[True]), 3),
            "mem_ratio": round(mem[True] / mem[False], 3) if mem[False] > 0 else None,
            "today_mib": round(mem[False], 1), "shared_mib": round(mem[True], 1),
            "rows_started_above_layer0": round(started_above_0(rows, args.batch_size, lm.num_layers), 3)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small", help="shape of the 7B-proportioned VLM")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--samples", type=int, default=2, help="grounding samples per workload")
    p.add_argument("--batch-size", type=int, default=16, help="rows per batch, both paths")
    p.add_argument("--max-new-tokens", type=int, default=8, help="greedy answer length limit")
    p.add_argument("--repeats", type=int, default=2, help="timed rounds after one warm-up round")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--quick", action="store_true", help="a smoke run: tiny shapes, one round, no warm-up")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.quick:
        args.size, args.repeats, args.samples, args.max_new_tokens = "quick", 1, 1, 4
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="vrh-bench-sweep-") as tmp:
        from vrh.data import load_dataset
        from vrh.models.loading import load_model
        from vrh.organism.world import write_split

        org = load_model("organism", device=args.device, dtype=args.dtype)
        world = list(load_dataset(write_split(Path(tmp) / "world", max(args.samples, 1), 1, "grounding")))
        vrh_c, rand_c = sweep_conditions(org.num_layers, org.num_heads, [0, 1, 3, 6], 3)
        out["organism"] = measure(org, world, vrh_c + rand_c, args)
        print("organism", json.dumps(out["organism"]), flush=True)

        lm = vlm(args.size, dtype, args.device)
        root = Path(tmp) / "vlm"
        root.mkdir()
        smp = samples(root, args.samples, SIZES[args.size]["image"])
        ks = [0, 1, 5, 10, 20] if lm.num_layers * lm.num_heads >= 40 else [0, 1, 2]
        vrh_c, rand_c = sweep_conditions(lm.num_layers, lm.num_heads, ks, 3)
        out["vlm"] = measure(lm, smp, vrh_c + rand_c, args)
        print("vlm (paper sweep)", json.dumps(out["vlm"]), flush=True)
        out["vlm_vrh_only"] = measure(lm, smp, vrh_c, args)
        print("vlm (unmasked + top-k rows)", json.dumps(out["vlm_vrh_only"]), flush=True)
    out["setup"] = {"size": args.size, "device": args.device, "dtype": args.dtype, "samples": args.samples,
                    "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
