"""What each analysis runs with: one typed settings value per library call, declared once from the option
groups of :mod:`vrh.options` plus the analysis' own options.

The same value is three things: the command's ``Config`` (``vrh sweep``'s options are :class:`SweepSettings`'
fields; ``cli.py`` generates the parser from them), the argument of the library call that writes the run
folder (:func:`vrh.experiments.kcurves.run_sweep`), and what a study cell builds from its settings
(:mod:`vrh.study.kinds`), so a cell's folder is the one the same command line writes. ``config.json`` records
it (:func:`vrh.options.config_record`) under its ``COMMAND``; ``DATA_PARALLEL`` says whether its run shards
its samples under torchrun / accelerate launch (:func:`vrh.experiments.setup.check_data_parallel`).

:class:`DetectSettings` is the detection's own value (no model, data or run folder): ``vrh.detect_heads``
takes it, and it travels unchanged from the options to every batch.

Only :mod:`vrh.options` is imported here, so ``vrh --help`` builds every parser without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from vrh.options import (DEFAULT_K_RULE, DataOptions, DetectOptions, EvalOptions, GenerationOptions, MaskOptions,
                         ModelOptions, PairOptions, RunOptions, ShareOptions, ints, option, optional_int,
                         redefault)


def take(cls: type, source: Any, **overrides: Any) -> Any:
    """A ``cls`` value with each of its fields read from ``source`` (an object with those attributes, e.g.
    a command's settings), or from ``overrides``."""
    return cls(**{f.name: overrides[f.name] if f.name in overrides else getattr(source, f.name)
                  for f in fields(cls) if f.init})


def with_options(settings: Any, options: dict[str, Any], where: str) -> Any:
    """``settings`` with ``options`` (keyword arguments naming its fields) replaced: the keyword convenience of
    a library call that takes one settings value. An unknown name is a TypeError naming the ones it takes."""
    from dataclasses import replace

    known = {f.name for f in fields(settings) if f.init}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword argument(s) {unknown}; it takes "
                        f"{type(settings).__name__}'s fields: {', '.join(sorted(known))}")
    return replace(settings, **options) if options else settings


# --- detection ----------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class DetectSettings(DetectOptions, GenerationOptions):
    """What one detection is computed with: the detection options (scorers, answer, split, overlays, one
    pass) and the generation options (batch size, answer length). ``vrh detect``, ``vrh compare``, ``vrh demo``
    and ``vrh.detect_heads`` build it once; :func:`vrh.experiments.detection.detect_heads` hands it to every
    batch (:func:`vrh.experiments.detection_batch.detect_batch`)."""

    @property
    def capture(self) -> str:
        """Where the main rows come from: the answering generate() or a teacher-forced forward."""
        return "generate" if self.one_pass and self.answer == "model" else "teacher_forced"


@dataclass(frozen=True, kw_only=True)
class DetectRunSettings(ModelOptions, DataOptions, DetectOptions, GenerationOptions, RunOptions):
    """``vrh detect``: :func:`vrh.experiments.detection.run_detect`."""

    COMMAND: ClassVar[str] = "detect"
    DATA_PARALLEL: ClassVar[bool] = True

    paper_model: str | None = option(None, metavar="NAME",
                                     help="compare the top-20 with this paper model's published lists (App. D), "
                                          "e.g. Qwen2.5-VL-7B, or 'none' for no comparison (default: the model "
                                          "the checkpoint's hub id or config.json names)")


# --- masked evaluations -------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class EvaluateSettings(ModelOptions, DataOptions, EvalOptions, MaskOptions, GenerationOptions,
                       ShareOptions, RunOptions):
    """``vrh evaluate``: :func:`vrh.experiments.masked_evaluation.run_evaluate`."""

    COMMAND: ClassVar[str] = "evaluate"
    DATA_PARALLEL: ClassVar[bool] = True

    mask_heads: str | None = option(None, metavar="RUN|L:H,...",
                                    help="detection run folder (its top --k heads), a head list LAYER:HEAD,... or "
                                         "paper:MODEL/BENCHMARK (the paper's top-20 list, App. D, e.g. "
                                         "paper:Qwen2.5-VL-7B/RefCOCO) or another method's published list (e.g. "
                                         "qrhead:Qwen2.5-7B-Instruct/NQ; vrh heads list); omit for no masking")
    k: int | None = option(None, parse=optional_int,
                           help="how many top heads of the detection run --mask-heads to mask (or random heads to "
                                f"draw with --random) (default: {DEFAULT_K_RULE})")
    random: bool = option(False, help="mask --k random heads drawn outside the detected set instead")
    seed: int = option(0, help="seed of the random heads")


@dataclass(frozen=True, kw_only=True)
class SweepSettings(ModelOptions, DataOptions, EvalOptions, MaskOptions, GenerationOptions, ShareOptions, RunOptions):
    """``vrh sweep`` (and a study's sweep and crosstask cells): :func:`vrh.experiments.kcurves.run_sweep`."""

    COMMAND: ClassVar[str] = "sweep"
    DATA_PARALLEL: ClassVar[bool] = True

    heads: str = option(metavar="RUN", help="detection run folder whose ranking is swept (vrh detect --out)")
    ks: tuple[int, ...] | None = option(None, parse=ints, metavar="K,K",
                                        help="k values: mask the top-k detected heads, and k random heads outside "
                                             f"them (0 = unmasked) (default: 0, 1, k/2, k and 2k, k = {DEFAULT_K_RULE}, "
                                             "less any k with no room for k random heads)")
    seeds: tuple[int, ...] = option((0, 1, 2), parse=ints, metavar="S,S",
                                    help="random-head seeds: one random control per (k, seed)")


# --- preference pairs ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PairsSettings(ModelOptions, PairOptions, MaskOptions, GenerationOptions, ShareOptions, RunOptions):
    """``vrh dpo-pairs``: :func:`vrh.experiments.preference_pairs.run_pairs`."""

    COMMAND: ClassVar[str] = "dpo-pairs"

    random_negatives: bool = option(False, help="control: mask --k random heads outside the detected set, redrawn "
                                                "for every sample, instead of the detected heads")


# --- the answer-format probe --------------------------------------------------------------------------
def _variants_help() -> str:
    """``--variants``' help, with the box writings registered now (no torch: answer_formats reads text only)."""
    from vrh.models.answer_formats import box_writings

    return ('JSON file of variants of your own to try as well: a list of {"name", "prompt" (with one {expression}), '
            '"box" (a box writing: ' + ", ".join(box_writings()) + '), "about"}; prompt or box left out = the '
            "family's own (default: none)")


@dataclass(frozen=True, kw_only=True)
class ProbeFormatSettings(ModelOptions, DataOptions, GenerationOptions):
    """``vrh probe-format``: :func:`vrh.experiments.format_probe.run_probe_format`."""

    COMMAND: ClassVar[str] = "probe-format"

    # every variant is probed: --answer-format (which one a run uses) is no option here
    answer_format: str | None = option(None, cli=False, help="not read: the probe tries every variant")
    n: int = option(20, help="grounding samples each variant answers: the first N of --data")
    variants: str | None = option(None, metavar="FILE", help=_variants_help)
    shared: bool = option(False, help="also try every shared variant the family does not declare")
    tau: float = option(0.5, help="IoU threshold for a correct box")
    json_out: str | None = option(None, flag="--json", metavar="FILE",
                                  help="also write the table as JSON to FILE (default: stdout only)")


# --- text retrieval heads -----------------------------------------------------------------------------
def floats(text: str) -> tuple[float, ...]:
    """``"0,0.5,1"`` -> ``(0.0, 0.5, 1.0)``."""
    import argparse

    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


@dataclass(frozen=True, kw_only=True)
class TextHeadsSettings(ModelOptions, RunOptions):
    """``vrh text-heads``: :func:`vrh.experiments.text_heads.run_text_heads`."""

    COMMAND: ClassVar[str] = "text-heads"

    haystack: str | None = option(None, choices=("sentences", "items"),
                                  help="haystack style: 'sentences' (generated English about coloured shapes, the "
                                       "needle a secret code of random numbers) or 'items' (the item lists organism "
                                       "C read, the needle one item's box; the organisms' vocabulary) (default: "
                                       "sentences where the model's tokenizer has its words, else items; said on "
                                       "stderr)")
    answer_format: str | None = option(None, cli=False, help="not read: the needle prompts are text, no box")
    contexts: tuple[int, ...] | None = option(None, parse=ints, metavar="T,T",
                                              help="prompt lengths in tokens (default: a quarter, a half and all of "
                                                   "the model's context less --max-new-tokens, at most 4096)")
    depths: tuple[float, ...] = option((0.0, 0.25, 0.5, 0.75, 1.0), parse=floats, metavar="D,D",
                                       help="needle depths, fractions of the haystack before the needle")
    needle_lengths: tuple[int, ...] = option((4,), parse=ints, metavar="N,N",
                                             help="numbers in the needle (an 'items' needle is always 4)")
    needles: int = option(4, help="tests per (context, depth, length) cell, each with its own needle")
    seed: int = option(0, help="seed of the generated prompts")
    max_new_tokens: int = redefault(GenerationOptions, "max_new_tokens", 32)
    k: int | None = option(None, parse=optional_int,
                           help=f"heads masked in the causal test (default: {DEFAULT_K_RULE})")
    seeds: tuple[int, ...] = option((0, 1, 2), parse=ints, metavar="S,S",
                                    help="random-head seeds: one random control of k heads per seed")
    cross_heads: str | None = option(None, metavar="RUN|L:H,...",
                                     help="also mask the top --k heads of this head set on the needle test: a "
                                          "detection run (e.g. the VRHs), a head list or a named set (vrh heads list) "
                                          "(default: none)")
    text_scorer: str = option("copy_paste", choices=("copy_paste", "qrhead"),
                              help="how a head's text retrieval is scored: copy_paste (Retrieval Heads: what the answer "
                                   "copies from the needle, over the tests answered right) or qrhead (QRHead: the "
                                   "question's attention on the needle minus a null question's, over every test)")
    mask_mode: str = redefault(MaskOptions, "mask_mode", "zero")
    exclude_layers: tuple[int, ...] = redefault(MaskOptions, "exclude_layers", ())
    scorer: str | None = redefault(MaskOptions, "scorer", None)
