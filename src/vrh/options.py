"""Command options, declared once: a dataclass field with its default and help, from which ``cli.py``
generates the argparse parser.

Every command's ``Config`` is a keyword-only frozen dataclass assembled from the option groups below
(model, data, evaluation, masking, run folder) plus its own fields; an option's flag, type, default and help
text exist only in its field. ``parse_config(Config, namespace)`` builds the config back from parsed
arguments, so there is no hand mapping between the two. Defaults show in ``--help``.

An option whose values come from a registry (``--task``, ``--answer-rule``'s rules, ``--mask-mode``) takes
its choices or help as a function, called when a parser is built: the list is the registry's at that moment,
extensions included, and never written here.

Example::

    @dataclass(frozen=True, kw_only=True)
    class Config(ModelOptions, RunOptions):
        k: int = option(3, help="heads to mask")

    parser = argparse.ArgumentParser(); add_options(parser, Config)
    cfg = parse_config(Config, parser.parse_args(["--k", "5", "--out", "runs/x"]))
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vrh.core.masking import mask_mode_names, mask_modes
from vrh.data.answer_rule_registry import answer_rules
from vrh.tasks import describe_tasks, task_names
from vrh.tasks.answer_rules import RULE_CHOICES

REQUIRED = dataclasses.MISSING  # an option with no default must be given


def option(default: Any = REQUIRED, *, help: str | Callable[[], str], flag: str | None = None,
           parse: Callable[[str], Any] | None = None,
           choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None, metavar: str | None = None,
           negate: str | None = None, cli: bool = True) -> Any:
    """A config field that is also a command-line option.

    ``flag``: the option string (default ``--field-name``); ``parse``: text -> value (default: the type of
    ``default``); ``negate``: for a bool defaulting to True, the flag that turns it off (``--no-disjoint``);
    ``cli=False``: a setting of the library function only (no flag). ``help`` and ``choices`` may be
    functions of no argument, read when a parser is built (:func:`option_help`, :func:`option_choices`).
    """
    if choices is not None and not callable(choices):
        choices = tuple(choices) or None
    meta = {"help": help, "flag": flag, "parse": parse, "choices": choices, "metavar": metavar, "negate": negate,
            "cli": cli}
    if isinstance(default, (list, dict, set)):
        raise TypeError("option defaults must be immutable (use a tuple)")
    return dataclasses.field(default=default, metadata={"vrh_option": meta})


def redefault(group: type, name: str, default: Any) -> Any:
    """``group``'s option ``name`` with another default for one command (e.g. demo's batch size): flag,
    help and parser stay declared once, in the group."""
    f = next(f for f in dataclasses.fields(group) if f.name == name)
    return option(default, **f.metadata["vrh_option"])


def ints(text: str) -> tuple[int, ...]:
    """``"0,1,3"`` -> ``(0, 1, 3)``."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def positive_ints(text: str) -> tuple[int, ...]:
    """``"5,10"`` -> ``(5, 10)``; a value below 1 (a top-0 or top--1 overlap) is refused.

    >>> positive_ints("5,10")
    (5, 10)
    """
    values = ints(text)
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return values


def names(text: str) -> tuple[str, ...]:
    """``"a, b"`` -> ``("a", "b")``."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def optional_int(text: str) -> int | None:
    return None if text.lower() in ("", "none", "all") else int(text)


DEFAULT_K_RULE = "10% of the model's heads, rounded, at least 1"


def default_k(num_layers: int, num_heads: int) -> int:
    """The k a command masks when ``--k`` is not given (:data:`DEFAULT_K_RULE`): a k that scales with the
    model, where a fixed 20 was refused on a 32-head model and masked 2.5% of a 784-head one.

    >>> default_k(4, 8), default_k(28, 28), default_k(1, 4)
    (3, 78, 1)
    """
    return max(1, round(0.1 * num_layers * num_heads))


def default_ks(k: int, num_layers: int, num_heads: int) -> tuple[int, ...]:
    """The k values swept when ``--ks`` is not given: 0, 1, k/2, k and 2k, less any that leaves no room for
    as many random heads outside the top-k (``L * H - k < k``).

    >>> default_ks(3, 4, 8), default_ks(1, 1, 2)
    ((0, 1, 3, 6), (0, 1))
    """
    total = num_layers * num_heads
    return tuple(sorted(kk for kk in {0, 1, max(1, k // 2), k, 2 * k} if kk <= total - kk))


def option_help(f: dataclasses.Field) -> str:
    """The option's help text as ``--help`` shows it now (a function's result, read from its registry)."""
    text = f.metadata["vrh_option"]["help"]
    return text() if callable(text) else text


def option_choices(f: dataclasses.Field) -> tuple[Any, ...] | None:
    """The values the option accepts now (None: any its parser reads)."""
    choices = f.metadata["vrh_option"]["choices"]
    return tuple(choices()) if callable(choices) else choices


def _or_list(items: Sequence[str]) -> str:
    """``a, b, or c`` (``a or b``, ``a``)."""
    items = list(items)
    return items[0] if len(items) == 1 else (" or ".join(items) if len(items) == 2
                                             else ", ".join(items[:-1]) + ", or " + items[-1])


def _flag(f: dataclasses.Field) -> str:
    return f.metadata["vrh_option"]["flag"] or "--" + f.name.replace("_", "-")


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) if value else "none"
    return "none" if value is None else str(value)


def add_options(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add one argparse option per ``option`` field of the dataclass ``cls``, in declaration order."""
    for f in _ordered_fields(cls):
        meta = f.metadata.get("vrh_option")
        if meta is None or not meta["cli"]:
            continue
        required = f.default is REQUIRED
        text = option_help(f)
        says_default = "(default:" in text  # the help explains its default (e.g. what None means)
        help_text = text + ("" if required or says_default else f" (default: {_show(f.default)})")
        help_text = help_text.replace("%", "%%")
        if isinstance(f.default, bool):
            if f.default and meta["negate"]:
                parser.add_argument(meta["negate"], dest=f.name, action="store_false", help=text)
            elif not f.default:
                parser.add_argument(_flag(f), dest=f.name, action="store_true", help=text)
            else:
                raise TypeError(f"{cls.__name__}.{f.name}: a bool option defaulting to True needs negate=")
            continue
        parse = meta["parse"] or (type(f.default) if f.default not in (None, REQUIRED) else str)
        parser.add_argument(_flag(f), dest=f.name, type=parse, required=required, choices=option_choices(f),
                            default=None if required else f.default, metavar=meta["metavar"], help=help_text)


def _ordered_fields(cls: type) -> list[dataclasses.Field]:
    """Fields in the order a reader expects in --help: option groups in the order the class lists its
    bases (model, data, ...), then the command's own options."""
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    order: list[str] = []
    for klass in [*cls.__mro__[1:], cls]:
        for name in getattr(klass, "__annotations__", {}):
            if name in by_name and name not in order:
                order.append(name)
    return [by_name[n] for n in order]


def parse_config(cls: type, ns: argparse.Namespace, **overrides: Any):
    """The ``cls`` config from parsed arguments (every option field), plus ``overrides``."""
    kwargs = {f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)
              if "vrh_option" in f.metadata and f.metadata["vrh_option"]["cli"] and hasattr(ns, f.name)}
    return cls(**kwargs, **overrides)


def config_record(cfg: Any, exclude: Sequence[str] = ("resume", "overwrite", "threads", "answer_format",
                                                     "random_from", "share_vision", "share_prefix", "paper_model")
                  ) -> dict[str, Any]:
    """A config as stored in ``config.json``: everything but how this invocation runs (resume/overwrite,
    thread count, the exact work sharing of :class:`ShareOptions`, which paper list detect prints beside its
    heads), so a resumed run's config equals the
    interrupted one's. ``answer_format`` is recorded
    resolved, where the model is (``model.answer_format``: name, prompt and box writing in effect), not as
    the option was written: the default and the family's first named explicitly are one setting. Likewise
    ``random_from`` is recorded resolved, in ``exclude_layers`` (:func:`vrh.experiments.setup.fit_random_pool`).
    The knockout settings (:class:`KnockoutOptions`) are recorded where a knockout mode runs: elsewhere they
    change nothing, and run folders written before them (which a resume compares with) lack them."""
    record = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in exclude}
    if not str(record.get("mask_mode", "")).startswith("knockout-"):
        for f in dataclasses.fields(KnockoutOptions):
            record.pop(f.name, None)
    return record


# --- option groups ------------------------------------------------------------------------------------
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    # required (as lmms-eval and the HF scripts require it): a default model ran the toy organism on a user's data
    # and scored it without a word; vrh demo alone defaults to the organism
    model: str = option(help="checkpoint folder, hub id, or 'organism' / 'organism:NAME' (the shipped model "
                             "organism)")
    adapter: str | None = option(None, help="adapter to use instead of the one the checkpoint's model type "
                                            "picks: a name from 'vrh models' or package.module:Class (a custom "
                                            "adapter, docs/adapters.md)")
    device: str = option("cpu", help="torch device, e.g. cuda:0")
    dtype: str = option("float32", choices=DTYPES, help="model weights dtype")
    answer_format: str | None = option(None, metavar="NAME",
                                       help="how grounding prompts ask for a box and answers are read: a variant the "
                                            "family declares or a shared one (vrh probe-format lists and tries "
                                            "them), or FILE.json:NAME, a variant of your own; recorded in "
                                            "config.json as model.answer_format (default: the family's first, its "
                                            "own format)")
    device_map: str | None = option(None, metavar="MAP",
                                    help="spread a model too big for one GPU over several: auto (or balanced, "
                                         "balanced_low_0, sequential) or a JSON object {module: device}; needs "
                                         "accelerate; inputs then go to the input embeddings' device and --device "
                                         "is not used (default: none, the whole model on --device)")
    threads: int | None = option(None, parse=optional_int, help="torch CPU threads (default: 1 on a CPU device "
                                                                "with the organism, else torch's choice)")


@dataclass(frozen=True, kw_only=True)
class GenerationOptions:
    batch_size: int = option(16, help="samples per forward")
    max_new_tokens: int = option(64, help="greedy answer length limit")


@dataclass(frozen=True, kw_only=True)
class ShareOptions:
    """What the rows of one sample share in a batch of masking conditions (:mod:`vrh.core.sharing`). Exact: the
    answers and records are the same either way, so these say how a run computes, not what it computes, and
    are not recorded in ``config.json`` (a run may be resumed with other values)."""

    share_vision: bool = option(True, negate="--no-share-vision",
                                help="run the vision encoder for every masking condition's row (default: once per "
                                     "distinct image of a batch; exact, the same answers)")
    share_prefix: bool = option(True, negate="--no-share-prefix",
                                help="run every row's whole prompt forward (default: a sample's rows in a batch "
                                     "compute the layers below their first masked layer once; exact, the same "
                                     "answers)")


@dataclass(frozen=True, kw_only=True)
class DataOptions:
    data: str = option(help="dataset JSONL in the vrh format (see README, 'Dataset format')")


def _task_help() -> str:
    """``--task``'s help: every registered task, with its few words (``Task.help``)."""
    return "task of the evaluated samples: " + _or_list([f"{name} ({words})" if words else name
                                                          for name, words in describe_tasks().items()])


def _answer_rule_help() -> str:
    """``--answer-rule``'s help: the benchmarks whose own rule is registered, by name."""
    rules = ", ".join(f"{r.name} ({r.benchmark})" for r in answer_rules())
    return ("how VQA answers are scored: 'official' the rule a sample's answer_rule names, its benchmark's own ("
            + rules + "; vrh's rule for data without one), or 'lenient' vrh's rule for the answer type (reads "
            "'The answer is (B).', 'three'); recorded in config.json")


def _mask_mode_help() -> str:
    """``--mask-mode``'s help: every registered mode, with what it does to a head."""
    return "how a masked head is knocked out: " + ", or ".join(f"'{m.name}' {m.help}" for m in mask_modes())


@dataclass(frozen=True, kw_only=True)
class EvalOptions:
    task: str = option("grounding", choices=task_names, help=_task_help)
    n: int | None = option(None, parse=optional_int, help="evaluate the first N held-out samples (default: all of them)")
    tau: float = option(0.5, help="IoU threshold for a correct box")
    clip_boxes: bool = option(False, help="clip predicted boxes to the image before IoU (default: scored as written, "
                                          "as lmms-eval's RefCOCO evaluation does)")
    answer_rule: str = option("official", choices=RULE_CHOICES, help=_answer_rule_help)
    disjoint: bool = option(True, negate="--no-disjoint",
                            help="also evaluate samples the detection run scored (default: only samples it did not score, "
                                 "paper App. H)")

    def task_settings(self) -> dict[str, Any]:
        """The settings a task may take from these options (``vrh.tasks.task_from_settings`` passes each
        task only the ones it declares)."""
        return {"tau": self.tau, "clip": self.clip_boxes, "answer_rule": self.answer_rule}


@dataclass(frozen=True, kw_only=True)
class KnockoutOptions:
    """What the knockout mask modes block (:mod:`vrh.core.knockout`); recorded in ``config.json`` with the rest."""

    blocked_queries: str = option("answer", choices=("answer", "image"),
                                   help="knockout modes: the queries whose attention is blocked, 'answer' those "
                                        "that produce the answer tokens (the rows Eq. 1 scores) or 'image' every "
                                        "position from the image on (docs/guide.md, Knockout)")
    referent_min_overlap: float = option(0.0, help="knockout-referent: minimum fraction of a visual cell inside the "
                                                   "box for the cell to be the referent's (detection's "
                                                   "--min-overlap; 0 = any overlap)")


@dataclass(frozen=True, kw_only=True)
class MaskOptions(KnockoutOptions):
    mask_mode: str = option("zero", choices=mask_mode_names, help=_mask_mode_help)
    exclude_layers: tuple[int, ...] = option((), parse=ints, metavar="L,L",
                                             help="layers random heads are never drawn from, e.g. 0")
    random_from: str = option("visual", choices=("visual", "all"),
                              help="heads random controls draw from: 'visual', the heads that can attend to the image "
                                   "(every head, but in a cross-attention model such as Llama 3.2 Vision only its "
                                   "cross-attention heads: the other layers join --exclude-layers), or 'all'")
    scorer: str | None = option(None, help="scorer of the detection run that ranks the heads (default: its primary)")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    out: str = option(help="run folder to write")
    overwrite: bool = option(False, help="replace the vrh run in a non-empty --out (deletes what that run wrote; "
                                         "refuses a folder that is not a vrh run)")
    resume: bool = option(False, help="continue an interrupted run in --out (same settings), redoing only what is "
                                      "missing")


@dataclass(frozen=True, kw_only=True)
class DetectOptions:
    n: int = option(200, help="number of detection samples (the rest, or --n-eval of them, is held out)")
    n_eval: int | None = option(None, parse=optional_int, help="size of the held-out evaluation split "
                                                              "(default: every sample not used for detection)")
    scorers: tuple[str, ...] = option(("out/sum/mean",), parse=names, metavar="SPEC,SPEC",
                                      help="scorers, comma-separated; the first ranks the heads; options after a "
                                           "colon, e.g. qrhead:calibrate=false (see docs/guide.md)")
    answer: str = option("model", choices=("model", "gt"),
                         help="score the model's own greedy answer ('model') or the ground-truth box string ('gt')")
    min_overlap: float = option(0.0, help="key set: minimum fraction of a visual cell inside the GT box "
                                          "(0 = any overlap)")
    seed: int = option(0, help="seed of the detection / evaluation split (and of rand1 token choice)")
    detect_ids: str | None = option(None, metavar="FILE",
                                    help="file of sample ids, one per line, to detect on instead of a seeded draw of "
                                         "--n (default: the seeded draw); the rest is held out")
    n_overlays: int = option(8, help="samples whose per-head attention maps are kept for overlays")
    one_pass: bool = option(True, negate="--two-pass",
                            help="with --answer model: generate, then re-run prompt + answer text teacher-forced "
                                 "to capture the answer's attention rows (the paper's protocol). Default: one "
                                 "pass, the rows captured while generating (one generate per sample, scoring the "
                                 "generated token ids; equal wherever the answer text re-tokenizes to the "
                                 "generated ids)")


@dataclass(frozen=True, kw_only=True)
class PairOptions:
    """How DPO preference pairs are built (``vrh dpo-pairs``, ``vrh dpo``; paper App. B)."""

    heads: str = option(help="detection run folder (its top --k heads are the negative policy)")
    data: str | None = option(None, help="dataset of the training samples (none: the detection run's)")
    train: str = option("detect", choices=("detect", "data"),
                        help="training samples: the run's detection samples ('detect'), or every grounding sample "
                             "of --data the run did not hold out ('data')")
    n: int | None = option(None, parse=optional_int, help="use at most this many training samples (none: all)")
    pairs: int | None = option(None, parse=optional_int,
                               help="keep at most this many pairs, the first in sample order (none: every pair "
                                    "kept; paper: 6000)")
    rejected: str = option("any", choices=("any", "wrong"),
                           help="which rejected answers make a pair: 'any' that differs from the chosen one (the "
                                "paper's recipe), or only 'wrong' ones (IoU below the task's tau)")
    k: int | None = option(None, parse=optional_int,
                           help=f"how many heads the negative policy masks (default: {DEFAULT_K_RULE}; paper: 20)")
    seed: int = option(0, help="seed of the random negatives (sample i uses seed * 1000003 + i)")
    exclude_layers: tuple[int, ...] = option((0,), parse=ints, metavar="L,L",
                                             help="layers random negatives are never drawn from (paper: the first)")

    def __post_init__(self):
        if self.k is not None and self.k < 1:
            raise ValueError(f"--k must be >= 1, got {self.k}")
        if self.pairs is not None and self.pairs < 1:
            raise ValueError(f"--pairs must be >= 1, got {self.pairs}")


@dataclass(frozen=True, kw_only=True)
class DpoTrainOptions:
    """TRL ``DPOConfig`` settings of ``vrh dpo-train`` and ``vrh dpo``; defaults are the paper's (App. B: full
    parameters, lr 2e-7, 4 epochs) where it gives one, TRL's otherwise (beta)."""

    lr: float = option(2e-7, help="learning rate (paper: 2e-7)")
    epochs: float = option(4.0, help="epochs over the pairs (paper: 4)")
    max_steps: int = option(-1, help="stop after this many optimizer steps (-1: run --epochs)")
    beta: float = option(0.1, help="DPO beta: strength of the pull toward the reference model (TRL's default)")
    train_batch_size: int = option(1, help="pairs per device per forward")
    grad_accum: int = option(8, help="forwards per optimizer step (effective batch: --train-batch-size x this)")
    save_steps: int = option(50, help="write a resumable TRL checkpoint every this many steps (the last one is kept)")
    train_seed: int = option(0, help="seed of the trainer (data order, dropout)")
