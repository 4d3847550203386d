"""Parse time of hostile answers at 1x, 8x and 64x their length: does any parser grow faster than the text?

The cases are the tests' (``tests/support/adversarial_text.py``: about 10,000 characters at 1x). Each is parsed
by :func:`vrh.data.boxes.parse_box` (box cases) or by the VQA answer rules (answer cases: ``exact``, ``choice``,
``number``, ``length`` and the benchmarks' own rules), at the three sizes in interleaved rounds; the figure is CPU
time per parse (``time.process_time``; a shorter text is parsed 8 or 64 times per measurement), the best of the
rounds per size, and the ratios t(8x) / t(1x) and t(64x) / t(1x) are printed side by side (linear:
about 8 and 64; quadratic: 64 and 4,096). A case whose 8x ratio passes ``--stop-ratio`` is not run at 64x (it
would not finish). The tests prove linearity without a clock (``tests/support/regex_work.py`` counts the regex
engine's steps); this script is the clock's view.

    python benchmarks/parsers.py                  # every case, 5 rounds
    python benchmarks/parsers.py --rounds 3 --only "long digit run"
    python benchmarks/parsers.py --quick          # 1x and 8x, one round (tests/test_benchmark_parsers.py)

The last line is the JSON of every case: ``{"box": {name: {"chars": [...], "ms": [...], "ratios": [...]}},
"answer": {...}}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.adversarial_text import ANSWER_CASES, BOX_CASES, answer_text, box_text  # noqa: E402
from vrh.data.boxes import parse_box  # noqa: E402
from vrh.tasks.answer_rules import RULES, Gold  # noqa: E402
from vrh.data.answer_rule_registry import get_answer_rule  # noqa: E402

SCALES = (1, 8, 64)
# a gold answer per rule: every answer type's lenient rule and the benchmarks' own
_GOLDS = [(RULES["exact"], Gold("red")), (RULES["choice"], Gold("B", "choice")), (RULES["number"], Gold("3", "number")),
          (RULES["length"], Gold("0.7", "length"))]


def _answer_rules(text: str) -> None:
    for rule, gold in _GOLDS:
        rule(text, gold)
    for name, gold in (("mmstar", Gold("A", "choice")), ("cvbench", Gold("B", "choice")),
                       ("countbench", Gold("3", "number")), ("mathvista", Gold("3", "integer"))):
        get_answer_rule(name).score(text, gold)


def _best_ms(fn: Callable[[str], object], texts: list[str], rounds: int) -> list[float]:
    """CPU milliseconds per call of ``fn`` on each text, the best of ``rounds`` interleaved rounds. A shorter
    text is parsed proportionally more times per measurement, so every size is measured over about the same
    span of CPU time (a single 1 ms parse is at the mercy of one context switch on a busy machine)."""
    longest = max(len(t) for t in texts)
    best = [float("inf")] * len(texts)
    for _ in range(rounds):  # interleaved: every size sees the same load in each round
        for k, text in enumerate(texts):
            reps = max(1, longest // max(len(text), 1))
            start = time.process_time()
            for _ in range(reps):
                fn(text)
            best[k] = min(best[k], (time.process_time() - start) * 1000 / reps)
    return best


def measure(cases: dict, build: Callable[[str, float], str], fn: Callable[[str], object], scales: tuple[int, ...],
            rounds: int, stop_ratio: float, only: str | None) -> dict:
    out = {}
    for name in cases:
        if only and only != name:
            continue
        texts = [build(name, scales[0]), build(name, scales[1])]
        ms = _best_ms(fn, texts, rounds)
        if len(scales) > 2 and ms[1] / max(ms[0], 1e-6) < stop_ratio:  # all three sizes, interleaved
            texts.append(build(name, scales[2]))
            ms = _best_ms(fn, texts, rounds)
        out[name] = {"chars": [len(t) for t in texts], "ms": [round(m, 4) for m in ms],
                     "ratios": [round(m / max(ms[0], 1e-6), 1) for m in ms[1:]]}
    return out


def _table(title: str, rows: dict, scales: tuple[int, ...]) -> None:
    heads = " | ".join(f"{s}x CPU ms" for s in scales)
    ratios = " | ".join(f"{s}x / 1x" for s in scales[1:])
    print(f"\n{title}\n\n| case | chars at 1x | {heads} | {ratios} |\n|" + " --- |" * (2 + 2 * len(scales) - 1))
    for name, r in rows.items():
        ms = r["ms"] + [None] * (len(scales) - len(r["ms"]))
        rat = r["ratios"] + [None] * (len(scales) - 1 - len(r["ratios"]))
        cells = [f"{m:.3f}" if m is not None else "not run" for m in ms] + [f"{x}" if x else "-" for x in rat]
        print(f"| {name} | {r['chars'][0]} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per size (default 5; the best counts)")
    p.add_argument("--only", help="one case by name")
    p.add_argument("--stop-ratio", type=float, default=40.0, help="skip 64x when 8x / 1x passes this (default 40)")
    p.add_argument("--quick", action="store_true", help="1x and 8x, one round: a smoke run")
    args = p.parse_args(argv)
    scales, rounds = (SCALES[:2], 1) if args.quick else (SCALES, args.rounds)
    result = {"box": measure(BOX_CASES, box_text, parse_box, scales, rounds, args.stop_ratio, args.only),
              "answer": measure(ANSWER_CASES, answer_text, _answer_rules, scales, rounds, args.stop_ratio, args.only)}
    _table("parse_box (vrh.data.boxes)", result["box"], scales)
    _table("VQA answer rules (exact, choice, number, length, mmstar, cvbench, countbench, mathvista)",
           result["answer"], scales)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
