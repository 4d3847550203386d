"""The ``vrh`` command line: ``main(argv)`` with one subcommand per experiment.

Heads are written ``LAYER:HEAD`` (0-based), e.g. ``--mask-heads 3:1,10:4``. ``--model`` takes a local
checkpoint folder, a hub id, or ``organism`` (the shipped model organism).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

def _model_args(p: argparse.ArgumentParser, default_model: str | None = "organism") -> None:
    p.add_argument("--model", default=default_model, required=default_model is None,
                   help="checkpoint folder, hub id, or 'organism' (default: %(default)s)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cuda:0 (default: %(default)s)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=64)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _mask_mode_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mask-mode", choices=["zero", "uniform"], default="zero",
                   help="how a masked head is knocked out: 'zero' its output, or 'uniform' attention over the "
                        "keys it may see (Retrieval Heads' ablation) (default: %(default)s)")


# --- detect -------------------------------------------------------------------------------------------
def _detect_args(p):
    _model_args(p)
    p.add_argument("--data", required=True, help="dataset JSONL (vrh format)")
    p.add_argument("--n", type=int, default=200, help="number of detection samples (default: %(default)s)")
    p.add_argument("--n-eval", type=int, default=None, help="size of the held-out evaluation split")
    p.add_argument("--scorers", default="out/sum/mean",
                   help="comma-separated scorer names; the first ranks the heads (default: %(default)s)")
    p.add_argument("--answer", choices=["model", "gt"], default="model",
                   help="score the model's own greedy answer or the ground-truth box string")
    p.add_argument("--min-overlap", type=float, default=0.0,
                   help="key set: minimum fraction of a visual cell inside the GT box (0 = any overlap)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="run folder to write")


def _detect(a):
    from vrh.experiments.detect import DetectConfig, detect

    detect(DetectConfig(model=a.model, data=a.data, out=a.out, n=a.n, n_eval=a.n_eval,
                        scorers=tuple(s.strip() for s in a.scorers.split(",") if s.strip()), answer=a.answer,
                        min_overlap=a.min_overlap, batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                        seed=a.seed, device=a.device, dtype=a.dtype))
    return 0


# --- evaluate -----------------------------------------------------------------------------------------
def _evaluate_args(p):
    _model_args(p)
    p.add_argument("--data", required=True)
    p.add_argument("--mask-heads", default=None,
                   help="detection run folder (its top-k heads) or a list LAYER:HEAD,...; omit for no masking")
    p.add_argument("--k", type=int, default=20, help="how many top heads of the run to mask")
    p.add_argument("--random", action="store_true", help="mask k random heads drawn outside the detected set")
    p.add_argument("--seed", type=int, default=0, help="seed of the random heads")
    p.add_argument("--exclude-layers", type=_ints, default=(), help="layers random heads avoid, e.g. 0")
    p.add_argument("--scorer", default=None, help="scorer of the detection run that ranks heads")
    _mask_mode_arg(p)
    p.add_argument("--task", choices=["grounding", "vqa"], default="grounding")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--no-disjoint", action="store_true",
                   help="also evaluate on the detection samples (default: held-out ids only)")
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")


def _evaluate(a):
    from vrh.experiments.evaluate import EvaluateConfig, evaluate

    evaluate(EvaluateConfig(model=a.model, data=a.data, out=a.out, mask_heads=a.mask_heads, k=a.k,
                            random=a.random, seed=a.seed, exclude_layers=a.exclude_layers, scorer=a.scorer,
                            mask_mode=a.mask_mode, n=a.n, task=a.task, disjoint=not a.no_disjoint,
                            batch_size=a.batch_size, max_new_tokens=a.max_new_tokens, device=a.device,
                            dtype=a.dtype, resume=a.resume))
    return 0


# --- sweep --------------------------------------------------------------------------------------------
def _sweep_args(p):
    _model_args(p)
    p.add_argument("--data", required=True, help="dataset JSONL (grounding or VQA samples)")
    p.add_argument("--heads", required=True, help="detection run folder whose ranking is swept")
    p.add_argument("--ks", type=_ints, default=(0, 1, 3, 5, 10, 20, 50), help="k values (default: 0,1,3,5,10,20,50)")
    p.add_argument("--seeds", type=_ints, default=(0, 1, 2), help="random-head seeds (default: 0,1,2)")
    p.add_argument("--task", choices=["grounding", "vqa"], default="grounding")
    p.add_argument("--n", type=int, default=None, help="evaluation samples (default: all held-out)")
    p.add_argument("--scorer", default=None, help="scorer of the detection run that ranks heads")
    p.add_argument("--exclude-layers", type=_ints, default=(), help="layers random heads avoid, e.g. 0")
    p.add_argument("--no-disjoint", action="store_true", help="also evaluate on the detection samples")
    _mask_mode_arg(p)
    p.add_argument("--out", required=True)
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")


def _sweep(a):
    from vrh.experiments.sweep import SweepConfig, sweep

    sweep(SweepConfig(model=a.model, data=a.data, heads=a.heads, out=a.out, ks=a.ks, seeds=a.seeds, task=a.task,
                      n=a.n, scorer=a.scorer, exclude_layers=a.exclude_layers, disjoint=not a.no_disjoint,
                      mask_mode=a.mask_mode, batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                      device=a.device, dtype=a.dtype, resume=a.resume))
    return 0


# --- compare ------------------------------------------------------------------------------------------
def _compare_args(p):
    _model_args(p)
    p.add_argument("--data", required=True, help="grounding dataset JSONL (vrh format)")
    p.add_argument("--n", type=int, default=200, help="detection samples (default: %(default)s)")
    p.add_argument("--n-eval", type=int, default=None, help="held-out evaluation samples (default: all the rest)")
    p.add_argument("--k", type=_ints, default=(5, 10, 20, 50), help="k values (default: 5,10,20,50)")
    p.add_argument("--methods", type=_names, default=None,
                   help="comma-separated scorers: QUERY/PHI/OMEGA variants and baselines (default: the 8 "
                        "{out,in} x {sum,argmax} x {mean,freq} variants, rand1/sum/mean, coord/sum/mean and "
                        "the 5 prior methods)")
    p.add_argument("--default", default="out/sum/mean",
                   help="reference method: random heads avoid its top-k; similarity is measured to it")
    p.add_argument("--seeds", type=_ints, default=(0, 1, 2), help="random-head seeds, >= 3 (default: 0,1,2)")
    _mask_mode_arg(p)
    p.add_argument("--answer", choices=["model", "gt"], default="model",
                   help="score the model's own greedy answer or the ground-truth box string")
    p.add_argument("--min-overlap", type=float, default=0.0, help="key set: minimum cell fraction inside the box")
    p.add_argument("--exclude-layers", type=_ints, default=(), help="layers random heads avoid, e.g. 0")
    p.add_argument("--seed", type=int, default=0, help="detection/evaluation split and rand1 seed")
    p.add_argument("--out", required=True)


def _compare(a):
    from vrh.experiments.compare import CompareConfig, compare

    methods = {"methods": a.methods} if a.methods else {}
    compare(CompareConfig(model=a.model, data=a.data, out=a.out, n=a.n, n_eval=a.n_eval, ks=a.k, **methods,
                          default=a.default, seeds=a.seeds, mask_mode=a.mask_mode,
                          answer=a.answer, min_overlap=a.min_overlap, exclude_layers=a.exclude_layers,
                          batch_size=a.batch_size, max_new_tokens=a.max_new_tokens, seed=a.seed,
                          device=a.device, dtype=a.dtype))
    return 0


# --- demo ---------------------------------------------------------------------------------------------
def _demo_args(p):
    p.add_argument("--out", default="runs/demo", help="run folder to write (default: %(default)s)")
    p.add_argument("--model", default="organism", help="organism checkpoint (default: %(default)s)")
    p.add_argument("--n-detect", type=int, default=200)
    p.add_argument("--n-eval", type=int, default=200)
    p.add_argument("--n-vqa", type=int, default=200)
    p.add_argument("--k", type=int, default=None, help="headline k (default: 10%% of all heads)")
    p.add_argument("--seeds", type=_ints, default=(0, 1, 2), help="random-head seeds (default: 0,1,2)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: the organism is tiny, and one thread never "
                   "oversubscribes a busy machine)")


def _demo(a):
    import torch

    from vrh.experiments.demo import DemoConfig, demo

    torch.set_num_threads(a.threads)
    demo(DemoConfig(out=a.out, model=a.model, n_detect=a.n_detect, n_eval=a.n_eval, n_vqa=a.n_vqa, k=a.k,
                    seeds=a.seeds, device=a.device))
    return 0


# --- organism -----------------------------------------------------------------------------------------
_ORGANISM_USAGE = ("usage: vrh organism build --out DIR [--export-to DIR]   (all stages, resumable)\n"
                   "       vrh organism pretrain-vision --out DIR [--patch-size P ...]\n"
                   "       vrh organism train --out DIR [--config PRESET_OR_JSON] [--steps N]")


def _organism_args(p):
    p.add_argument("organism_args", nargs=argparse.REMAINDER,
                   help="'build --out DIR', 'pretrain-vision --out DIR' or 'train --out DIR' (see each -h)")


def _organism(a):
    args = list(a.organism_args)
    if args and args[0] == "build":
        from vrh.organism.pipeline import main as run
    elif args and args[0] == "pretrain-vision":
        from vrh.organism.pretrain_vision import main as run
    elif args and args[0] == "train":
        from vrh.organism.train import main as run
    else:
        print(_ORGANISM_USAGE, file=sys.stderr)
        return 2
    return run(args[1:])


# --- transfer -----------------------------------------------------------------------------------------
def _transfer_args(p):
    _model_args(p)  # --model is model B, the one masked
    p.add_argument("--heads", required=True, help="model A's detection run folder (heads to transfer)")
    p.add_argument("--heads-b", default=None, help="model B's own detection run (own-heads condition + map similarity)")
    p.add_argument("--data", required=True)
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--seeds", type=_ints, default=(0, 1, 2), help="random-head seeds (default: 0,1,2)")
    p.add_argument("--scorer", default=None, help="scorer ranking heads in both runs (default: each run's primary)")
    p.add_argument("--exclude-layers", type=_ints, default=(), help="layers random heads avoid, e.g. 0")
    p.add_argument("--task", choices=["grounding", "vqa"], default="grounding")
    p.add_argument("--n", type=int, default=None, help="evaluation samples (default: all held-out)")
    p.add_argument("--no-disjoint", action="store_true", help="also evaluate on the detection samples")
    p.add_argument("--out", required=True)


def _transfer(a):
    from vrh.experiments.transfer import TransferConfig, transfer

    transfer(TransferConfig(heads=a.heads, model=a.model, data=a.data, out=a.out, heads_b=a.heads_b, k=a.k,
                            seeds=a.seeds, scorer=a.scorer, exclude_layers=a.exclude_layers, task=a.task, n=a.n,
                            disjoint=not a.no_disjoint, batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                            device=a.device, dtype=a.dtype))
    return 0


# --- stability ----------------------------------------------------------------------------------------
def _stability_args(p):
    _model_args(p)
    p.set_defaults(model=None)  # the sample-size curve needs no model; token choice does
    p.add_argument("--heads", required=True, help="detection run folder (its sample_scores.npz)")
    p.add_argument("--data", default=None, help="dataset for token choice (default: the detection run's)")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--n-values", type=_ints, default=(1, 2, 5, 10, 20, 50, 100, 200),
                   help="scoring-set sizes (default: 1,2,5,10,20,50,100,200)")
    p.add_argument("--bootstrap", type=int, default=10, help="draws per n (default: %(default)s)")
    p.add_argument("--scorer", default=None, help="scorer whose maps are resampled (default: the run's primary)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=_ints, default=(0, 1, 2), help="random-head seeds of the token-choice control")
    p.add_argument("--accuracy-draws", type=int, default=0,
                   help="per n, also mask the top-k of this many draws and report accuracy (needs --model)")
    p.add_argument("--n-eval", type=int, default=None, help="cap on held-out samples evaluated")
    p.add_argument("--out", required=True)


def _stability(a):
    from vrh.experiments.stability import StabilityConfig, stability

    stability(StabilityConfig(heads=a.heads, out=a.out, model=a.model, data=a.data, k=a.k, n_values=a.n_values,
                              bootstrap=a.bootstrap, scorer=a.scorer, seed=a.seed, seeds=a.seeds,
                              accuracy_draws=a.accuracy_draws, n_eval=a.n_eval, batch_size=a.batch_size,
                              max_new_tokens=a.max_new_tokens, device=a.device, dtype=a.dtype))
    return 0


# --- dpo-pairs ----------------------------------------------------------------------------------------
def _dpo_pairs_args(p):
    _model_args(p)
    p.add_argument("--heads", required=True, help="detection run folder (top-k VRHs = negative policy)")
    p.add_argument("--data", default=None, help="dataset (default: the detection run's)")
    p.add_argument("--train", choices=["detect", "data"], default="detect",
                   help="training samples: the run's detection samples, or all of --data not held out")
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--random-negatives", action="store_true", help="control: k random heads per example")
    p.add_argument("--seed", type=int, default=0, help="seed of the random negatives")
    p.add_argument("--exclude-layers", type=_ints, default=(0,), help="layers random negatives avoid (default: 0)")
    p.add_argument("--scorer", default=None, help="scorer of the detection run that ranks heads")
    p.add_argument("--n", type=int, default=None, help="cap on training samples")
    p.add_argument("--out", required=True)


def _dpo_pairs(a):
    from vrh.experiments.dpo import DPOPairsConfig, dpo_pairs

    dpo_pairs(DPOPairsConfig(model=a.model, heads=a.heads, out=a.out, data=a.data, k=a.k, train=a.train,
                             random_negatives=a.random_negatives, seed=a.seed, exclude_layers=a.exclude_layers,
                             scorer=a.scorer, n=a.n, batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                             device=a.device, dtype=a.dtype))
    return 0


# --- report -------------------------------------------------------------------------------------------
def _report_args(p):
    from vrh.report import add_arguments

    add_arguments(p)


def _report(a):
    from vrh.report import report_main

    return report_main(a)


# name -> (help, add_arguments, run); the order is the order of --help
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "demo": ("the whole method on the shipped model organism, offline (the README's main command)",
             _demo_args, _demo),
    "detect": ("score every LM head on grounding samples and rank them", _detect_args, _detect),
    "evaluate": ("answer with heads masked and measure accuracy (IoU >= 0.5)", _evaluate_args, _evaluate),
    "organism": ("build / train the model organism (vrh organism build --out DIR)", _organism_args, _organism),
    "report": ("one self-contained HTML (+ Markdown) report from any run folders", _report_args, _report),
    "sweep": ("accuracy vs k: top-k detected heads vs k random heads over seeds", _sweep_args, _sweep),
    "compare": ("every head-scoring variant and prior method, one detection, causal test per k (Tab. A9)",
                _compare_args, _compare),
    "transfer": ("mask model A's top-k heads in model B (same layer x head grid) vs B's own and random",
                 _transfer_args, _transfer),
    "stability": ("top-k overlap vs number of scoring samples; which output tokens to score",
                  _stability_args, _stability),
    "dpo-pairs": ("DPO preference pairs: unmasked answer (chosen) vs top-k VRHs masked (rejected)",
                  _dpo_pairs_args, _dpo_pairs),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vrh", description="Find, prove and characterize Visual Retrieval Heads in VLMs. "
        "Heads are LAYER:HEAD, 0-based.")
    from vrh import __version__

    parser.add_argument("--version", action="version", version=f"vrh {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help, add_args, _) in COMMANDS.items():
        add_args(sub.add_parser(name, help=help, description=help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command][2](args)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"vrh {args.command}: error: {e}", file=sys.stderr)
        return 2
