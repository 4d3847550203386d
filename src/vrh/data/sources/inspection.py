"""Look at a converted dataset before spending GPU hours on it: counts, box and answer statistics, and
a few samples rendered with their boxes drawn (``vrh data inspect FILE --out DIR``).

Reads the file as every run will (:func:`vrh.data.load_dataset`, bad lines skipped and counted), so
what it reports is what ``vrh detect`` / ``evaluate`` will see. Each (benchmark, split) in the file is
counted against the paper's count for it (:mod:`vrh.data.sources.paper_counts`), with the reasons they
differ; what the conversion did (``--limit``, skips, rows outside the subset, options) is read from the
``convert.json`` that ``vrh data convert`` wrote beside the file, when there is one.
"""

from __future__ import annotations

import io
import json
import re
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

from vrh.data import json_text
from vrh.data.jsonl import Sample, load_dataset
from vrh.data.sources.paper_counts import ConversionFacts, check_count
from vrh.runs import safe_paths

QUANTILES = (0, 25, 50, 75, 100)
N_TOP = 10  # most frequent answers listed per answer type
CAPTION_CHARS = 60  # characters per caption line of a rendered sample


def _quantiles(values: list[float]) -> dict[str, float] | None:
    import numpy as np

    if not values:
        return None
    q = np.percentile(np.asarray(values, dtype=float), QUANTILES)
    return {f"p{p}": round(float(v), 4) for p, v in zip(QUANTILES, q)}


def box_stats(samples: list[Sample]) -> dict[str, Any]:
    """Box width, height (px) and area as a fraction of the image, as quantiles; ``n_small``: boxes under
    1% of the image (often a normalised box read as pixels, or a wrong annotation).

    >>> from pathlib import Path
    >>> s = Sample(id="a", image_path=Path("x"), task="grounding", expression="e", box=(0, 0, 10, 5),
    ...            image_size=(100, 50))
    >>> box_stats([s])["area_fraction"]["p50"], box_stats([s])["n_small"]
    (0.01, 0)
    """
    widths, heights, fractions = [], [], []
    for s in samples:
        if s.box is None:
            continue
        x1, y1, x2, y2 = s.box
        W, H = s.read_image_size()
        widths.append(x2 - x1)
        heights.append(y2 - y1)
        fractions.append((x2 - x1) * (y2 - y1) / (W * H))
    return {"n": len(widths), "width_px": _quantiles(widths), "height_px": _quantiles(heights),
            "area_fraction": _quantiles(fractions), "n_small": sum(f < 0.01 for f in fractions)}


def answer_stats(samples: list[Sample]) -> dict[str, Any]:
    """Per VQA answer type: how many samples and the most frequent gold answers (a set whose gold is
    nearly always "A" or "yes" is easy to game; see it before running)."""
    by_type: dict[str, Counter] = {}
    for s in samples:
        if s.task == "vqa" and s.answer is not None:
            by_type.setdefault(s.answer_type, Counter())[s.answer] += 1
    return {t: {"n": sum(c.values()), "top": c.most_common(N_TOP)} for t, c in sorted(by_type.items())}


def _conversion(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The ``convert.json`` beside ``path`` (None when absent), and why it could not be read."""
    summary = path.parent / "convert.json"
    if not summary.is_file():
        return None, None
    try:
        d = json_text.loads(summary.read_text(encoding="utf-8"), max_depth=None)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{summary} could not be read ({type(e).__name__}: {e}); counts compared without it"
    if not isinstance(d, dict):
        return None, f"{summary} is not a JSON object; counts compared without it"
    return d, None


def paper_count_checks(samples: list[Sample], path: str | Path) -> tuple[list[dict[str, Any]], str | None]:
    """Per (benchmark, split) in the file, in first-seen order: its sample count next to the paper's, with
    the reasons they differ (``line``: the printed form); and a note when ``convert.json`` is unreadable."""
    conversion, note = _conversion(Path(path))
    groups = Counter((str(s.meta.get("benchmark", "?")), str(s.meta.get("split", "?"))) for s in samples)
    checks = []
    for (source, split), n in groups.items():
        if source == "?":  # a hand-written file: the lines do not say which benchmark they are
            checks.append({"benchmark": source, "split": split, "n": n, "paper_n": None, "status": "unknown",
                           "line": f"{n} samples name no benchmark (their `benchmark` field): no paper count to "
                                   "compare"})
            continue
        facts = None
        if conversion is not None and (conversion.get("source"), conversion.get("split")) == (source, split):
            facts = ConversionFacts.from_json(conversion)
        check = check_count(source, split, n, facts)
        checks.append({"benchmark": source, "split": split, **check.to_json(), "line": check.line()})
    return checks, note


def summarize_dataset(path: str | Path) -> tuple[dict[str, Any], list[Sample]]:
    samples = load_dataset(path, on_error="skip")
    report = samples.report
    assert report is not None  # load_dataset always attaches its LoadReport
    text_words = [len((s.expression or s.question or "").split()) for s in samples]
    summary = {
        "path": str(path), "n": len(samples), "n_bad_lines": report.n_skipped,
        "bad_lines": [{"line": ln, "reason": r} for ln, r in report.skipped[:N_TOP]],
        "tasks": dict(Counter(s.task for s in samples)),
        "benchmarks": dict(Counter(str(s.meta.get("benchmark", "?")) for s in samples)),
        "n_images": len({s.image_path for s in samples}),
        "boxes": box_stats(samples), "answers": answer_stats(samples),
        "text_words": _quantiles([float(n) for n in text_words]),
    }
    summary["paper_counts"], note = paper_count_checks(samples, path)
    if note:
        summary["convert_json_note"] = note
    for key in ("image_source", "category", "split"):  # what per-group scores (CV-Bench, MMStar) need
        values = [s.meta[key] for s in samples if s.meta.get(key) is not None]
        if values:
            summary[key] = dict(Counter(map(str, values)).most_common())
    return summary, samples


def render(sample: Sample, path: Path) -> Path:
    """The sample's image with its GT box drawn and its text (expression, or question and answer) below."""
    from PIL import Image, ImageDraw

    im = sample.load_image()
    W, H = im.size
    if sample.task == "grounding":
        text = f"{sample.id}: {sample.expression}"
    elif sample.task == "point":
        text = f"{sample.id}: {sample.question}\n=> a point inside the mask (box: the mask's bounds)"
    else:
        text = f"{sample.id}: {sample.question}\n=> {sample.answer} ({sample.answer_type})"
    lines = [w for part in text.splitlines() for w in (textwrap.wrap(part, CAPTION_CHARS) or [""])]
    line_h = 12
    canvas = Image.new("RGB", (max(W, 6 * CAPTION_CHARS + 8), H + line_h * len(lines) + 8), "white")
    canvas.paste(im, (0, 0))
    draw = ImageDraw.Draw(canvas)
    if sample.box is not None:
        draw.rectangle(list(sample.box), outline=(255, 0, 0), width=max(1, min(W, H) // 100))
    for i, line in enumerate(lines):
        draw.text((4, H + 4 + i * line_h), line, fill=(0, 0, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    canvas.save(buf, format="PNG")
    safe_paths.write_atomic(path.parent, path, buf.getvalue())  # a planted link at the name is not written through
    return path


def inspect_dataset(path: str | Path, out: str | Path, n_render: int = 8) -> dict[str, Any]:
    """Write ``out/inspect.json`` (the summary) and ``out/<k>_<id>.png`` for ``n_render`` samples spread
    evenly over the file; returns the summary (with ``rendered``: the PNG file names)."""
    if n_render < 0:
        raise ValueError(f"--n-render must be >= 0, got {n_render}")
    summary, samples = summarize_dataset(path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    picks = sorted({round(i * (len(samples) - 1) / max(n_render - 1, 1)) for i in range(n_render)}) if samples else []
    names = [f"{k:02d}_{re.sub(r'[^A-Za-z0-9._+-]+', '_', samples[i].id)}.png" for k, i in enumerate(picks)]
    summary["rendered"] = [render(samples[i], out / name).name for i, name in zip(picks, names)]
    safe_paths.write_atomic(out, out / "inspect.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return summary


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The summary for a terminal, one fact per line."""
    out = [f"{summary['path']}: {summary['n']} samples ({', '.join(f'{k} {v}' for k, v in summary['tasks'].items())}), "
           f"{summary['n_images']} images, {summary['n_bad_lines']} bad lines"]
    for b in summary["bad_lines"]:
        out.append(f"  bad line {b['line']}: {b['reason']}")
    boxes = summary["boxes"]
    if boxes["n"]:
        af = boxes["area_fraction"]
        out.append(f"boxes: {boxes['n']}; area as a fraction of the image: min {af['p0']:.3g}, median {af['p50']:.3g}, "
                   f"max {af['p100']:.3g}; {boxes['n_small']} under 1%")
    for t, a in summary["answers"].items():
        top = ", ".join(f"{ans!r} {n}" for ans, n in a["top"][:5])
        out.append(f"answers ({t}): {a['n']}; most frequent: {top}")
    for key in ("image_source", "category"):
        if key in summary:
            out.append(f"{key}: " + ", ".join(f"{k} {v}" for k, v in list(summary[key].items())[:8]))
    for check in summary.get("paper_counts", []):
        named = check["benchmark"] != "?"
        out.append(f"{check['benchmark']} {check['split']}: {check['line']}" if named else check["line"])
    if summary.get("convert_json_note"):
        out.append(f"note: {summary['convert_json_note']}")
    if summary.get("rendered"):
        out.append(f"rendered {len(summary['rendered'])} samples")
    return out
