"""``vrh probe-format``: which prompt/answer variant makes a checkpoint answer boxes vrh reads correctly.

Each variant (:mod:`vrh.models.answer_formats`: the family's declared ones, optionally every shared one, and a
user's file) answers the same first ``n`` grounding samples of the data, unmasked; per variant the table gives
the parse rate (answers with a box the variant reads), the accuracy at the IoU threshold, and one raw answer.
Variants that ask with the same prompt share one generation (``pixels`` and ``resized`` differ only in how
the answer is read), so the probe costs one greedy pass per distinct prompt.

Why no run folder: the probe chooses a setting before a run rather than measuring something a later stage
reads. Its table goes to stdout and, with ``--json FILE``, to a JSON file; the run that follows records the
variant it used (``config.json``'s ``model.answer_format``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vrh.data import Sample
from vrh.data import boxes as grounding
from vrh.experiments.settings import ProbeFormatSettings
from vrh.models import answer_formats as af
from vrh.models.loading import LoadedModel

EXAMPLE_CHARS = 60  # of the raw answer shown in the table (the JSON keeps it whole)


@dataclass(frozen=True)
class VariantResult:
    """One variant on the probe's samples: how many answers it read a box from and how many were correct."""

    name: str
    origin: str  # "family" (declared by the adapter), "shared" or the user's file
    prompt: str | None  # the prompt template in effect
    box: str  # the box writing ("native": the family's own parse_box)
    n: int
    parsed: int
    correct: int
    example: str  # the first sample's raw answer

    @property
    def parse_rate(self) -> float:
        return self.parsed / self.n if self.n else 0.0

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "parse_rate": self.parse_rate, "accuracy": self.accuracy}


@dataclass
class FormatProbe:
    """The probe's result: one row per variant, the one ``detect`` uses by default and how to pick another."""

    model: dict[str, Any]
    data: dict[str, Any]
    tau: float
    variants: list[VariantResult] = field(default_factory=list)
    default: str = ""

    @property
    def best(self) -> VariantResult | None:
        """The most accurate variant (then the best parsed; the first on a tie), None without variants."""
        return max(self.variants, key=lambda v: (v.correct, v.parsed), default=None)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "data": self.data, "tau": self.tau, "default": self.default,
                "best": self.best.name if self.best else None, "variants": [v.to_json() for v in self.variants]}


def probe_variants(adapter: Any, variants_file: str | None = None, shared_too: bool = False
                   ) -> list[tuple[af.AnswerFormat, str]]:
    """``(variant, origin)`` to probe, in order: the family's (its default first), then every shared variant
    the family does not declare when ``shared_too``, then those of ``variants_file``. A name may appear once."""
    out = [(f, "family") for f in af.declared(adapter)]
    if shared_too:
        out += [(f, "shared") for f in af.SHARED if f.name not in {g.name for g, _ in out}]
    if variants_file:
        taken = {f.name for f, _ in out}
        mine = af.read_variants(variants_file)
        clash = sorted(taken & {f.name for f in mine})
        if clash:
            raise ValueError(f"--variants {variants_file}: {clash} already name variants of the family or shared "
                             "ones; rename yours")
        out += [(f, str(variants_file)) for f in mine]
    return out


def probe_formats(lm: LoadedModel, samples: Sequence[Sample], variants: Sequence[tuple[af.AnswerFormat, str]], *,
                  tau: float = 0.5, batch_size: int = 16, max_new_tokens: int = 64,
                  advance: Callable[[int], None] | None = None) -> list[VariantResult]:
    """Answer ``samples`` in each variant (unmasked, greedy) and judge the answers with the grounding task."""
    from vrh.infra.oom import halving_on_oom
    from vrh.models.generation import generate_answers
    from vrh.tasks import get_task

    task = get_task("grounding", tau=tau)
    images: dict[str, Any] = {}
    answered: dict[tuple[str, ...], tuple[list[str], list[dict[str, Any]]]] = {}  # prompts -> (texts, metas)
    out = []
    for fmt, origin in variants:
        vlm = lm.with_answer_format(fmt)
        adapter = vlm.adapter
        prompts = tuple(task.prompt(adapter, s) for s in samples)
        if prompts not in answered:
            texts: list[str] = []
            metas: list[dict[str, Any]] = []

            def answer(part: Sequence[int], vlm: LoadedModel = vlm, prompts: tuple[str, ...] = prompts):
                ims = [images[samples[i].id] if samples[i].id in images
                       else images.setdefault(samples[i].id, samples[i].load_image()) for i in part]
                return generate_answers(vlm, ims, [prompts[i] for i in part], max_new_tokens=max_new_tokens)

            for start in range(0, len(samples), batch_size):
                for t, m in halving_on_oom(answer, list(range(start, min(start + batch_size, len(samples)))),
                                           "probe-format"):
                    texts += t
                    metas += m
                if advance is not None:
                    advance(min(batch_size, len(samples) - start))
            answered[prompts] = (texts, metas)
        texts, metas = answered[prompts]
        recs = [task.judge(adapter, s, t, m) for s, t, m in zip(samples, texts, metas, strict=True)]
        rec = af.record(adapter)
        out.append(VariantResult(
            name=fmt.name, origin=origin, prompt=rec["prompt"], box=rec["box"], n=len(recs),
            parsed=sum(r["outcome"] != grounding.PARSE_FAILURE for r in recs),
            correct=sum(r["outcome"] == grounding.CORRECT for r in recs), example=texts[0] if texts else ""))
    return out


def run_probe_format(cfg: ProbeFormatSettings, lm: Any = None) -> FormatProbe:
    """``vrh probe-format``: the table on stdout, a JSON copy in ``cfg.json_out`` when given. Bad data or a bad
    variants file fails before the model loads."""
    from vrh.experiments.heldout import GROUNDING_HINT, load_task_samples
    from vrh.experiments.setup import load
    from vrh.infra.console import console, print_result, print_table, printable
    from vrh.infra.console import progress as progress_bar

    if cfg.n < 1:
        raise ValueError(f"--n must be >= 1, got {cfg.n}")
    samples, data_info = load_task_samples(cfg.data, "grounding", GROUNDING_HINT)
    samples = samples[:cfg.n]
    if cfg.variants:
        af.read_variants(cfg.variants)  # a bad file fails before the model loads
    lm = load(cfg, lm)
    variants = probe_variants(lm.adapter, cfg.variants, cfg.shared)
    n_prompts = len({tuple(af.apply(lm.adapter, f).grounding_prompt(s.expression) for s in samples)
                     for f, _ in variants})
    console.print(f"probe-format: {len(variants)} variant(s), {n_prompts} distinct prompt(s), {len(samples)} "
                  f"grounding samples of {cfg.data}")
    with progress_bar(n_prompts * len(samples), "probe-format", unit="answers") as advance:
        results = probe_formats(lm, samples, variants, tau=cfg.tau, batch_size=cfg.batch_size,
                                max_new_tokens=cfg.max_new_tokens, advance=advance)
    probe = FormatProbe(model=lm.describe(), data={**data_info, "n": len(samples)}, tau=cfg.tau,
                        variants=results, default=af.declared(lm.adapter)[0].name)
    rows = [[("* " if v.name == probe.default else "  ") + v.name, v.origin, v.parse_rate, v.accuracy,
             printable(v.example)[:EXAMPLE_CHARS]] for v in results]
    print_table(f"answer formats of {lm.path} ({lm.adapter.name}) on {len(samples)} samples",
                ["variant", "from", "parse rate", f"acc@{cfg.tau:g}", "one raw answer"], rows)
    best = probe.best
    print_result(f"probe-format: detect, evaluate, sweep, ... use '{probe.default}' (the {lm.adapter.name} family's "
                 "first, marked *); choose another with --answer-format NAME"
                 + (f" (a variant of {cfg.variants}: --answer-format {cfg.variants}:NAME)" if cfg.variants else ""))
    if best is not None and best.name != probe.default and best.correct > _of(results, probe.default).correct:
        print_result(f"probe-format: '{best.name}' was the most accurate here ({best.correct}/{best.n} correct): "
                     f"--answer-format {_spec(best, cfg.variants)}")
    if cfg.json_out:
        import json

        Path(cfg.json_out).write_text(json.dumps(probe.to_json(), indent=1) + "\n", encoding="utf-8")
        console.print(f"probe-format: table written to {cfg.json_out}")
    return probe


def _of(results: Sequence[VariantResult], name: str) -> VariantResult:
    return next(v for v in results if v.name == name)


def _spec(v: VariantResult, variants_file: str | None) -> str:
    return f"{variants_file}:{v.name}" if variants_file and v.origin == str(variants_file) else v.name


def never_parsed_line(command: str, n: int | None, failures: int | None, lm: Any, data: Any) -> str | None:
    """The stdout line for a grounding run in which no answer held a box (``failures`` of ``n`` parse failures):
    its accuracy of 0 says the answer format is wrong, not that the model cannot ground; None otherwise."""
    if not n or failures != n:
        return None
    fmt = af.in_use(lm.adapter).name
    return (f"{command}: every answer failed to parse ({n} of {n} held no box in the '{fmt}' answer format), so the "
            f"accuracy measures the format, not the model: vrh probe-format --model {lm.path} --data {data} tries "
            "the prompt/answer variants; then rerun with --answer-format NAME")
