"""What vrh's capture, masking and batched conditions cost, measured side by side in one run (issue 16).

Why: vrh claims that (b) capturing the attention rows detection needs costs about a plain (a) sdpa forward
over prompt + answer, where the prior methods' (c) eager ``output_attentions=True`` materializes every
``[B, H, N, N]`` map; that masking heads barely slows greedy ``generate``; that several masking
conditions sharing one batch (:func:`vrh.core.masking.mask_heads_per_row`) beat running them one by one; and
that one-pass detection (rows captured during the answering ``generate``, ``detect_heads(one_pass=True)``)
costs about one plain ``generate`` (``detect_vs_generate``; the two-pass detection's ratio is printed next to
it). Each
claim is a ratio of two measurements taken in the same run, interleaved round by round so that load from
other processes hits both sides alike (the reported ratio is the median of the per-round ratios).

Model: a random-init Qwen2.5-VL whose language model has the ``--size`` shape (``small``: 4 layers, hidden
512, 8 query / 2 KV heads; ``7b``: Qwen2.5-VL-7B's LM, 28 layers, hidden 3584, 28 / 4 heads). Capture and
generate runs are **LM only**: the sequence is text tokens around N stand-ins for visual tokens (the vision
tower's cost is the same on every side of each ratio, and on CPU it would dominate). The
batched-conditions run goes through the real path (processor, tiny vision tower, images, the grounding
task, :func:`vrh.experiments.runner.run_conditions` with ``batch_conditions`` on and off), once per ``--cond-samples``
value: 2 samples per condition (the JSON ratio: one condition alone fills 2 of 16 rows, as with few
samples or the per-sample head sets of ``stability`` / ``dpo-pairs``) and 16 (batches already full; no
arithmetic is saved, so on a compute-bound CPU expect about 1).

Peak memory (capture vs forward vs eager) is the peak above the level just before the forward:

* CPU: each (mode, N) runs in its own subprocess (``--quick``: in this process), with glibc's mmap threshold
  fixed at 128 KiB (``mallopt``) so freed tensors go back to the OS; after one warm-up forward the peak RSS
  (``VmHWM``) is reset through ``/proc/self/clear_refs`` and the peak RSS minus the RSS before the forward
  is reported. Where ``clear_refs`` is unavailable, ``resource.ru_maxrss`` deltas are used (they can
  under-report if something earlier peaked higher).
* CUDA: ``torch.cuda.max_memory_allocated`` after a reset, minus the allocation before the forward.

The detection run goes through the real path too (a ``--generate-tokens`` visual-token image, the grounding
task, ``detect_heads`` with the ``out/sum/mean`` scorer, no overlays) against ``generate_answers`` on the
same sample, every answer forced to ``--max-new-tokens`` (the last one an EOS, as real answers end: a cut
answer costs one-pass detection one more decode step, see :mod:`vrh.core.generation_capture`).

The last line printed is one JSON object (keys as in issue 16)::

    python benchmarks/capture.py                        # CPU, small LM, N = 256, 1024, 3328
    python benchmarks/capture.py --quick                # a few-second smoke run
    python benchmarks/capture.py --device cuda --dtype bfloat16 --size 7b
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

SIZES = {  # language model shapes; the vision tower is always tiny (see the module docstring)
    "quick": dict(layers=2, hidden=128, heads=4, kv_heads=2, intermediate=256, vocab=512),
    "small": dict(layers=4, hidden=512, heads=8, kv_heads=2, intermediate=1382, vocab=2048),
    "7b": dict(layers=28, hidden=3584, heads=28, kv_heads=4, intermediate=18944, vocab=152064),
}
MODES = ("sdpa", "capture", "eager")
PREFIX, PROMPT, EXPRESSION, ANSWER = 16, 32, 6, 24  # text tokens around the N visual ones (LM-only runs)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# --- model ---------------------------------------------------------------------------------------
def processor():
    """The tiny offline Qwen2.5-VL processor of vrh's test models (tokenizer ids match :func:`build_model`)."""
    from vrh.testing.tiny_models import tiny_qwen2_5_vl

    return tiny_qwen2_5_vl(seed=0, max_pixels=448 * 448)[1]


def build_model(args, attn: str = "sdpa"):
    """Random-init Qwen2.5-VL with the ``--size`` language model and a tiny vision tower, on ``--device``."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    s, tok = SIZES[args.size], processor().tokenizer
    half = s["hidden"] // s["heads"] // 2  # rotary frequencies, split over (t, h, w) like the real family
    section = [half - 2 * (half * 3 // 8), half * 3 // 8, half * 3 // 8]
    text = dict(vocab_size=max(s["vocab"], len(tok)), hidden_size=s["hidden"], intermediate_size=s["intermediate"],
                num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                max_position_embeddings=8192, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": section})
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=s["hidden"],
                  patch_size=14, window_size=56, fullatt_block_indexes=[0])
    ids = {k: tok.convert_tokens_to_ids(t) for k, t in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]}
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
    torch.manual_seed(0)
    with torch.device(args.device):  # initialized where it runs (a 7B init on the CPU takes minutes)
        model = Qwen2_5_VLForConditionalGeneration._from_config(cfg, attn_implementation=attn,
                                                                dtype=DTYPES[args.dtype])
    gen = model.generation_config
    gen.pad_token_id, gen.eos_token_id, gen.do_sample = tok.pad_token_id, tok.eos_token_id, False
    return model.eval()


def lm_inputs(args, n_visual: int) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    """One sample's ids (text, N visual stand-ins, prompt with an expression, answer) and its query rows."""
    g = torch.Generator().manual_seed(n_visual)
    n = PREFIX + n_visual + PROMPT + ANSWER
    ids = torch.randint(20, SIZES[args.size]["vocab"], (1, n), generator=g)  # (1, N_total); ids < 20: specials
    answer = torch.arange(n - ANSWER, n)  # (A,)
    expression = torch.arange(PREFIX + n_visual + 8, PREFIX + n_visual + 8 + EXPRESSION)  # (E,)
    rows = torch.cat([answer - 1, expression]).unique()  # the rows detection captures: answer producers + expression
    return {"input_ids": ids.to(args.device)}, [rows]


# --- measuring -----------------------------------------------------------------------------------
def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def fix_malloc() -> None:
    """glibc: allocations >= 128 KiB are mmapped and unmapped on free (no dynamic threshold), so the RSS
    follows live tensors instead of what the allocator kept from earlier ones."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD


class PeakMemory:
    """Peak memory of the block above the level when it started, in bytes (see the module docstring)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")
        self.method = "cuda max_memory_allocated" if self.cuda else "peak RSS (VmHWM reset via clear_refs)"

    def __enter__(self):
        gc.collect()
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
        self.peak = max(self.peak, 0)  # the kernel syncs RSS counters lazily: a tiny block can read below 0
        return False


def forward_fn(model, mode: str, inputs, rows):
    """One teacher-forced pass over prompt + answer in ``mode``; returns what the mode hands back."""
    from vrh.models.adapters import get_adapter
    from vrh.core.capture import capture_attention_rows

    adapter = get_adapter("qwen2_5_vl")

    @torch.no_grad()
    def run():
        if mode == "sdpa":
            model(**inputs)
            return None
        if mode == "eager":  # the prior methods: every map, then the rows they score
            att = model(**inputs, output_attentions=True).attentions  # L x (B, H, N, N)
            return torch.stack([a[0][:, rows[0]] for a in att])  # (L, H, Q, N)
        with capture_attention_rows(model, adapter, rows) as cap:
            model(**inputs)
        return cap.rows(0)  # (L, H, Q, N)

    return run


def set_impl(model, mode: str) -> None:
    model.set_attn_implementation("eager" if mode == "eager" else "sdpa")


def memory_probe(args, mode: str, n_visual: int, model=None) -> dict:
    """Peak memory of one forward of ``mode`` at ``n_visual`` visual tokens, after a warm-up forward."""
    if model is None:
        fix_malloc()
        torch.set_num_threads(args.threads)
        model = build_model(args, attn="eager" if mode == "eager" else "sdpa")
    else:
        set_impl(model, mode)
    inputs, rows = lm_inputs(args, n_visual)
    run = forward_fn(model, mode, inputs, rows)
    run()  # warm-up: lazy allocations and kernels are not the forward's cost
    with PeakMemory(args.device) as mem:
        out = run()
        _sync(args.device)
    del out
    return {"mode": mode, "n": n_visual, "peak_bytes": mem.peak, "method": mem.method}


def timed(fn, device: str) -> float:
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def interleaved(fns: dict[str, Callable[[], object]], repeats: int, device: str) -> dict[str, list[float]]:
    """Seconds per call of each function, rounds interleaved (one warm-up round first, not kept)."""
    times = {k: [] for k in fns}
    for r in range(repeats + 1):
        for k, fn in fns.items():
            t = timed(fn, device)
            if r:
                times[k].append(t)
    return times


def ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    """Median of the per-round ratios ``num / den`` (robust to load that shifts between rounds)."""
    return statistics.median(a / b for a, b in zip(times[num], times[den]))


# --- the four measurements -------------------------------------------------------------------------
def bench_capture(args, model) -> dict:
    """Per N: time of sdpa / capture / eager (interleaved) and their peak memory (a subprocess each)."""
    out = {}
    for n in args.visual_tokens:
        inputs, rows = lm_inputs(args, n)
        fns, last = {}, {}
        for mode in MODES:
            run = forward_fn(model, mode, inputs, rows)
            fns[mode] = (lambda run=run, mode=mode: (set_impl(model, mode), last.__setitem__(mode, run())))
        times = interleaved(fns, args.repeats, args.device)
        set_impl(model, "sdpa")
        diff = (last["capture"].float().cpu() - last["eager"].float().cpu()).abs().max().item()  # (L, H, Q, N)
        last.clear()
        mem = {m: measure_memory(args, m, n, model) for m in MODES}
        out[str(n)] = {"times": times, "mem": mem}
        med = {m: statistics.median(times[m]) for m in MODES}
        mib = {m: mem[m]["peak_bytes"] / 2**20 for m in MODES}
        print(f"N={n:>5} visual (+{PREFIX + PROMPT + ANSWER} text) tokens, median s: "
              + "  ".join(f"{m} {med[m]:.3f}" for m in MODES)
              + "  | peak MiB: " + "  ".join(f"{m} {mib[m]:.1f}" for m in MODES)
              + f"  | captured vs eager rows: max abs diff {diff:.1e}", flush=True)
    return out


def measure_memory(args, mode: str, n: int, model) -> dict:
    if args.device.startswith("cuda") or args.quick:  # CUDA's counters are exact in-process; --quick: no spawns
        return memory_probe(args, mode, n, model)
    cmd = [sys.executable, os.path.abspath(__file__), *args.argv, "--memory-probe", f"{mode}:{n}"]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def bench_generate(args, model) -> dict:
    """Greedy generate of one sample, unmasked vs masked (``--k`` random heads), same number of tokens."""
    from vrh.models.adapters import get_adapter
    from vrh.core.heads import random_heads
    from vrh.core.masking import mask_heads

    adapter = get_adapter("qwen2_5_vl")
    s = SIZES[args.size]
    heads = random_heads(s["layers"], s["heads"], min(args.k, s["layers"] * s["heads"]), seed=0)
    inputs, _ = lm_inputs(args, args.generate_tokens)
    prompt = {"input_ids": inputs["input_ids"][:, :-ANSWER]}  # (1, N_prompt)
    kw = dict(max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens, do_sample=False)

    @torch.no_grad()
    def plain():
        model.generate(**prompt, **kw)

    @torch.no_grad()
    def masked():
        with mask_heads(model, adapter, heads):
            model.generate(**prompt, **kw)

    times = interleaved({"unmasked": plain, "masked": masked}, args.repeats, args.device)
    print(f"generate {args.max_new_tokens} tokens after {prompt['input_ids'].shape[1]} ({args.generate_tokens} "
          f"visual): unmasked {statistics.median(times['unmasked']):.3f} s, {len(heads)} heads masked "
          f"{statistics.median(times['masked']):.3f} s", flush=True)
    return times


def bench_conditions(args, model) -> dict[int, dict[str, list[float]]]:
    """``--conditions`` masking conditions through run_conditions, batched (rows of several conditions share
    a batch) vs one head set at a time, same ``--batch-size``; once per ``--cond-samples`` value.

    What to expect: batching removes no arithmetic (every (sample, condition) row is still prefilled and
    decoded), it fills batches. It pays when one condition alone would leave a batch mostly empty (few
    samples per condition, e.g. the per-sample random head sets of ``stability`` and ``dpo-pairs``, or a
    latency-bound GPU decode); with already-full batches on a compute-bound CPU the ratio is about 1.
    """
    from PIL import Image, ImageDraw

    from vrh.experiments import conditions as cond
    from vrh.models.adapters import get_adapter
    from vrh.data import Sample
    from vrh.models.loading import LoadedModel
    from vrh.experiments.runner import run_conditions
    from vrh.tasks import get_task

    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    s = SIZES[args.size]
    L, H = s["layers"], s["heads"]
    lm = LoadedModel(model, processor(), get_adapter("qwen2_5_vl"), "random-init")
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(L, H, generator=g)  # (L, H) a stand-in detection score map
    ks = sorted({max(1, (L * H) // d) for d in (16, 8, 4)})
    conds = [cond.none()] + [cond.top_k(scores, k, method="m") for k in ks]
    conds += [cond.random_outside(L, H, ks[-1], seed, outside=cond.top_k(scores, ks[-1], method="m").heads)
              for seed in range(max(0, args.conditions - len(conds)))]
    conds = conds[:args.conditions]
    task = get_task("grounding")
    out = {}
    # Every answer runs to --max-new-tokens (EOS suppressed): a random model stops at arbitrary steps, and a
    # batch decodes until its last row stops, so unequal stops would measure the model, not the batching.
    gen_cfg = model.generation_config
    min_before, gen_cfg.min_new_tokens = gen_cfg.min_new_tokens, args.max_new_tokens
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as restore:
        restore.callback(setattr, gen_cfg, "min_new_tokens", min_before)
        samples = []
        for i in range(max(args.cond_samples)):
            side = args.cond_image[i % len(args.cond_image)]
            im = Image.new("RGB", (side, side), (240, 240, 240))
            ImageDraw.Draw(im).rectangle([8 + 4 * i, 10, side // 2 + 4 * i, side // 2], fill=(200, 30, 30))
            im.save(Path(tmp) / f"im{i}.png")
            samples.append(Sample(id=f"s{i}", image_path=Path(tmp) / f"im{i}.png", task="grounding",
                                  expression="the red box", box=(8.0 + 4 * i, 10.0, side / 2 + 4 * i, side / 2)))
        for n in args.cond_samples:
            results = {}

            def run(batched: bool, n=n):
                results[batched] = run_conditions(lm, task, samples[:n], conds, batch_size=args.batch_size,
                                                  max_new_tokens=args.max_new_tokens, batch_conditions=batched)

            times = interleaved({"batched": lambda: run(True), "sequential": lambda: run(False)}, args.repeats,
                                args.device)
            same = results[True].records == results[False].records
            print(f"{len(conds)} conditions x {n} samples ({'/'.join(map(str, args.cond_image))} px images), batch "
                  f"{args.batch_size} rows, {args.max_new_tokens} new tokens: batched "
                  f"{statistics.median(times['batched']):.3f} s, one head set at a time "
                  f"{statistics.median(times['sequential']):.3f} s (ratio {ratio(times, 'batched', 'sequential'):.3f}); "
                  f"same records: {same}", flush=True)
            if not same:
                raise RuntimeError("batched and one-at-a-time conditions gave different records")
            out[n] = times
    return out


def bench_detect(args, model) -> dict[str, list[float]]:
    """One sample: plain greedy ``generate_answers`` vs detection in one pass vs in two passes (generate, then
    a teacher-forced capture forward over prompt + answer), interleaved; every answer --max-new-tokens long."""
    from PIL import Image, ImageDraw

    from vrh.models.adapters import get_adapter
    from vrh.data import Sample
    from vrh.experiments.detection import detect_heads
    from vrh.models.loading import LoadedModel
    from vrh.models.generation import generate_answers
    from vrh.tasks import get_task

    os.environ.setdefault("VRH_NO_PROGRESS", "1")
    lm = LoadedModel(model, processor(), get_adapter("qwen2_5_vl"), "random-init")
    side = 28 * max(1, round(args.generate_tokens ** 0.5))  # 28 px per merged visual token side
    task = get_task("grounding")
    gen_cfg, tok = model.generation_config, lm.processor.tokenizer
    # Every answer is --max-new-tokens - 1 tokens and an EOS, as a real answer ends (a box, then EOS): EOS held
    # back until then, and forced then (a steep length penalty on it). Ids past the tokenizer's (the LM's
    # vocabulary is larger) and other specials decode to nothing: an empty answer would be skipped, not scored.
    names = ("min_new_tokens", "suppress_tokens", "exponential_decay_length_penalty")
    before = {k: getattr(gen_cfg, k) for k in names}
    scored = {}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as restore:
        for k, v in before.items():
            restore.callback(setattr, gen_cfg, k, v)
        gen_cfg.min_new_tokens = args.max_new_tokens - 1
        gen_cfg.exponential_decay_length_penalty = (args.max_new_tokens - 2, 1e6)
        gen_cfg.suppress_tokens = sorted((set(range(len(tok), model.config.text_config.vocab_size))
                                          | set(tok.all_special_ids)) - {tok.eos_token_id})
        im = Image.new("RGB", (side, side), (240, 240, 240))
        ImageDraw.Draw(im).rectangle([side // 4, side // 4, side // 2, side // 2], fill=(200, 30, 30))
        im.save(Path(tmp) / "im.png")
        sample = Sample(id="d0", image_path=Path(tmp) / "im.png", task="grounding", expression="the red box",
                        box=(side / 4, side / 4, side / 2, side / 2))
        prompt = task.prompt(lm.adapter, sample)

        def generate():
            generate_answers(lm, [sample.load_image()], [prompt], args.max_new_tokens)

        def detect(one_pass: bool):
            det = detect_heads(lm, [sample], scorers=("out/sum/mean",), n_overlays=0, batch_size=1,
                               max_new_tokens=args.max_new_tokens, one_pass=one_pass)
            scored[one_pass] = det.head_scores.n_scored

        times = interleaved({"generate": generate, "one_pass": lambda: detect(True), "two_pass": lambda: detect(False)},
                            args.repeats, args.device)
    n_vis = len(lm.adapter.build_batch(lm.processor, [im], [prompt]).visual_positions[0])
    print(f"detect 1 sample ({n_vis} visual tokens, {args.max_new_tokens} new tokens, samples scored one/two-pass "
          f"{scored[True]}/{scored[False]}): generate {statistics.median(times['generate']):.3f} s, one-pass detect "
          f"{statistics.median(times['one_pass']):.3f} s (ratio {ratio(times, 'one_pass', 'generate'):.3f}), two-pass "
          f"detect {statistics.median(times['two_pass']):.3f} s (ratio {ratio(times, 'two_pass', 'generate'):.3f})",
          flush=True)
    return times


def _share(a: float, b: float) -> float | None:
    """``a / b`` rounded; None when either is below one page (nothing measurable, e.g. a --quick run)."""
    return round(a / b, 3) if min(a, b) >= 4096 else None


# --- the run -------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small", help="language model shape")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--visual-tokens", type=int, nargs="+", default=[256, 1024, 3328], metavar="N")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds after one warm-up round")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--k", type=int, default=16, help="heads masked in the masked generate")
    p.add_argument("--generate-tokens", type=int, default=256, help="visual tokens of the generate prompt")
    p.add_argument("--max-new-tokens", type=int, default=24, help="greedy answer length (forced)")
    p.add_argument("--conditions", type=int, default=6, help="masking conditions batched vs one at a time")
    p.add_argument("--cond-samples", type=int, nargs="+", default=[2, 16], metavar="N",
                   help="samples per condition, one comparison each; the first goes into the JSON")
    p.add_argument("--cond-image", type=int, nargs="+", default=[224], metavar="PX",
                   help="image sides in pixels, cycled over the samples (28 px per visual token side)")
    p.add_argument("--batch-size", type=int, default=16, help="rows per batch, both ways")
    p.add_argument("--quick", action="store_true", help="a few-second smoke run (tiny LM, small N, no subprocesses)")
    p.add_argument("--memory-probe", help=argparse.SUPPRESS)  # internal: MODE:N, one measurement
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.quick:
        args.size, args.visual_tokens, args.repeats, args.generate_tokens = "quick", [64, 256], 1, 16
        args.max_new_tokens, args.cond_samples, args.cond_image, args.batch_size = 4, [2], [56], 4
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.memory_probe:
        mode, n = args.memory_probe.split(":")
        print(json.dumps(memory_probe(args, mode, int(n))))
        return {}
    torch.set_num_threads(args.threads)
    if not args.quick:  # --quick measures in the caller's process (e.g. a test): leave its allocator alone
        fix_malloc()
    s = SIZES[args.size]
    print(f"LM {args.size}: {s['layers']} layers, hidden {s['hidden']}, {s['heads']} q / {s['kv_heads']} kv heads; "
          f"device {args.device} {args.dtype}, {args.threads} thread(s); LM-only capture/generate (random-init "
          f"Qwen2.5-VL, tiny vision tower); times: median of {args.repeats} interleaved rounds after a warm-up",
          flush=True)
    model = build_model(args)
    cap = bench_capture(args, model)
    gen = bench_generate(args, model)
    cnd = bench_conditions(args, model)
    det = bench_detect(args, model)

    by_n = {}
    for n, r in cap.items():
        mem = {m: r["mem"][m]["peak_bytes"] for m in MODES}
        by_n[n] = {"time_vs_forward": round(ratio(r["times"], "capture", "sdpa"), 3),
                   "mem_vs_forward": _share(mem["capture"], mem["sdpa"]),
                   "eager_mem_vs_vrh": _share(mem["eager"], mem["capture"])}
    if args.device.startswith("cuda"):
        top = str(max(args.visual_tokens))
        print(f"seconds per sample at {top} visual tokens: capture "
              f"{statistics.median(cap[top]['times']['capture']):.3f} s, sdpa forward "
              f"{statistics.median(cap[top]['times']['sdpa']):.3f} s")
    print(f"memory method: {cap[str(args.visual_tokens[0])]['mem']['sdpa']['method']}"
          + ("" if args.device.startswith("cuda") or args.quick else ", one subprocess per (mode, N)"))
    result = {"by_visual_tokens": by_n,
              "masked_generate_vs_unmasked": round(ratio(gen, "masked", "unmasked"), 3),
              "conditions_batched_vs_sequential": round(ratio(cnd[args.cond_samples[0]], "batched", "sequential"), 3),
              "detect_vs_generate": round(ratio(det, "one_pass", "generate"), 3)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
