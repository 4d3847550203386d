"""Cost of vrh's row capture next to a plain sdpa forward and an eager ``output_attentions=True`` forward.

Why: capture must make one teacher-forced forward serve every scorer at roughly sdpa cost, where the eager
path materializes every (B, H, N, N) map. Each mode runs in its own subprocess (same seed, so the same
random-init Qwen2.5-VL language model), so its peak memory is measured from a clean baseline:

* CUDA: ``torch.cuda.max_memory_allocated`` minus the allocation before the forward.
* CPU: peak RSS minus RSS before the forward, from ``/proc/self/status`` (VmHWM after resetting it through
  ``/proc/self/clear_refs``; falls back to ``resource.ru_maxrss`` deltas where that reset is unavailable,
  which can under-report when the model build peaked higher).

It also prints the bytes of attention each mode hands back (eager: all ``attentions``; capture: the rows)
and the max abs difference between captured rows and the eager rows.

    python benchmarks/bench_capture.py --layers 4 --hidden 512 --seq 1024 --queries 32 --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

MODES = ("sdpa", "capture", "eager")


class _Adapter:
    """Stand-in adapter: just where the language model's attention modules are."""

    def text_config(self, model):
        return model.config.text_config

    def num_layers(self, model):
        return model.config.text_config.num_hidden_layers

    def attention_module(self, model, layer):
        return model.model.language_model.layers[layer].self_attn


def build_model(args):
    """Random-init Qwen2.5-VL (tiny vision tower, unused) whose language model has the requested size."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    heads = max(1, args.hidden // 64)
    kv_heads = max(1, heads // 4)  # GQA like the real family (e.g. 28 q / 4 kv heads at 7B)
    half = (args.hidden // heads) // 2  # rotary frequencies split over (t, h, w)
    section = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    text = dict(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 27 // 10,
                num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                max_position_embeddings=max(4096, 2 * args.seq), pad_token_id=0, bos_token_id=1, eos_token_id=2,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": section})
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=args.hidden,
                  patch_size=14, fullatt_block_indexes=[0])
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=5, video_token_id=6,
                           vision_start_token_id=3, vision_end_token_id=4)
    torch.manual_seed(0)
    impl = "eager" if args.mode == "eager" else "sdpa"
    model = Qwen2_5_VLForConditionalGeneration._from_config(cfg, attn_implementation=impl, dtype=torch.float32)
    return model.to(args.device).eval()


def _inputs(args):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(10, args.vocab, (args.batch, args.seq), generator=g)  # (B, N)
    positions = [torch.arange(args.seq - args.queries, args.seq) for _ in range(args.batch)]  # answer-like tail
    return {"input_ids": ids.to(args.device)}, positions


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class PeakMemory:
    """Peak memory of the block above what was in use when it started, in bytes (see module doc)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.method = "cuda max_memory_allocated" if self.cuda else "peak RSS (VmHWM reset)"

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
            self.base = _rss_kib("VmRSS") * 1024
        except OSError:
            import resource

            self.method = "ru_maxrss delta"
            self.base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        elif self.method == "ru_maxrss delta":
            import resource

            self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.base
        else:
            self.peak = _rss_kib("VmHWM") * 1024 - self.base
        return False


def run_mode(args) -> dict:
    """One mode in this process: warm-up, then timed forwards; saves its rows for the diff."""
    from vrh.capture import capture_attention_rows

    torch.set_num_threads(args.threads)
    model = build_model(args)
    inputs, positions = _inputs(args)
    adapter = _Adapter()

    def forward():
        with torch.no_grad():
            if args.mode == "sdpa":
                model(**inputs)
                return None
            if args.mode == "eager":
                att = model(**inputs, output_attentions=True).attentions  # L x (B, H, N, N)
                return [torch.stack([a[b][:, p].float().cpu() for a in att]) for b, p in enumerate(positions)]
            with capture_attention_rows(model, adapter, positions) as cap:
                model(**inputs)
            return [cap.rows(b) for b in range(len(positions))]  # B x (L, H, Q, N)

    def returned_bytes():
        """Attention the mode hands back: eager's full maps vs capture's rows."""
        with torch.no_grad():
            if args.mode == "eager":
                return sum(a.numel() * a.element_size()
                           for a in model(**inputs, output_attentions=True).attentions)
            if args.mode == "capture":
                return sum(r.numel() * r.element_size() for r in forward())
        return 0

    forward()  # warm-up (allocator, kernels)
    times = []
    with PeakMemory(args.device) as mem:
        for _ in range(args.repeats):
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            rows = forward()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            if rows is not None and args.rows_out:
                torch.save(rows, args.rows_out)
            del rows
    return {"mode": args.mode, "time_s": statistics.median(times), "min_s": min(times), "peak_bytes": mem.peak,
            "memory_method": mem.method, "returned_bytes": returned_bytes()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=512, help="LM hidden size; heads = hidden/64, kv heads = heads/4")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--queries", type=int, default=32, help="captured query rows per sample (the last ones)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # internal: run one mode
    p.add_argument("--rows-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args)))
        return

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in MODES:
            cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--mode", mode,
                   "--rows-out", os.path.join(tmp, f"{mode}.pt")]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[mode] = json.loads(out.strip().splitlines()[-1])
        cap = torch.load(os.path.join(tmp, "capture.pt"))
        eag = torch.load(os.path.join(tmp, "eager.pt"))
        max_diff = max((c - e).abs().max().item() for c, e in zip(cap, eag))

    mib = 1 / 2**20
    print(f"LM: layers={args.layers} hidden={args.hidden} heads={max(1, args.hidden // 64)} "
          f"seq={args.seq} batch={args.batch} queries={args.queries} device={args.device} threads={args.threads}")
    print(f"peak memory: {results['sdpa']['memory_method']} above the pre-forward baseline; "
          f"time: median (min) of {args.repeats} after a warm-up")
    print(f"{'mode':<8} {'time s':>16} {'peak MiB':>10} {'returned attn MiB':>18}")
    for mode in MODES:
        r = results[mode]
        t = f"{r['time_s']:.3f} ({r['min_s']:.3f})"
        print(f"{mode:<8} {t:>16} {r['peak_bytes'] * mib:>10.1f} {r['returned_bytes'] * mib:>18.2f}")
    s, c, e = (results[m] for m in MODES)
    ratio = lambda a, b: a / b if b > 0 else float("nan")  # noqa: E731
    print(f"time   capture/sdpa = {ratio(c['time_s'], s['time_s']):.2f}x (min {ratio(c['min_s'], s['min_s']):.2f}x)"
          f"   eager/capture = {ratio(e['time_s'], c['time_s']):.2f}x (min {ratio(e['min_s'], c['min_s']):.2f}x)")
    print(f"memory capture/sdpa = {ratio(c['peak_bytes'], s['peak_bytes']):.2f}x   "
          f"eager/capture = {ratio(e['peak_bytes'], c['peak_bytes']):.2f}x   "
          f"returned eager/capture = {ratio(e['returned_bytes'], c['returned_bytes']):.1f}x")
    print(f"capture vs eager rows: max abs diff = {max_diff:.3e}")


if __name__ == "__main__":
    main()
