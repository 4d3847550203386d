"""Convert a benchmark from its local layout into vrh's JSONL format: ``DIR/data.jsonl`` plus
``DIR/images/``, with every skipped row and its reason in ``DIR/skipped.jsonl`` and a summary in
``DIR/convert.json``.

The policy for bad rows lives here, once, for every source: a row that cannot become a valid sample
(negative width, box outside the image, missing or corrupt image, empty expression, unknown answer
letter, ...) is *counted and reported* with its id and reason -- never a crash, never silent. A row the
chosen subset leaves out (:class:`~vrh.data.sources.registry.NotInSubset`) is counted apart: it is not a
fault. Problems with the snapshot as a whole (no such split, wrong columns, missing image files) are
errors raised before anything is written.

A conversion that keeps **no sample from a non-empty input**, or **skips more than half** of the rows it
was asked to convert (rows outside the subset aside), fails with :class:`ConversionFailed` naming the most
common skip reasons (:data:`MAX_SKIP_FRACTION`): that many bad rows means a wrong release, layout or
source (Toloka's first public test release, whose answer columns are empty), not a dataset with a few bad
rows. ``skipped.jsonl`` and ``convert.json`` (with the ``error``) are still written, to diagnose it;
``data.jsonl`` and ``images/`` are not, so no later run can take the remains for a dataset.

The written file is loaded back with :func:`vrh.data.load_dataset` before returning, so a converter bug
fails the conversion rather than a later GPU run.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vrh.data.jsonl import load_dataset, write_dataset
from vrh.data.sources.images import ImageStore
from vrh.data.sources.paper_counts import ConversionFacts, CountCheck, check_count
from vrh.data.sources.registry import NotInSubset, RowContext, Skip, SkipRow, get_source
from vrh.runs import safe_paths, written

DATA, SKIPPED, SUMMARY, IMAGES = "data.jsonl", "skipped.jsonl", "convert.json", "images"
ARTEFACTS = (DATA, SKIPPED, SUMMARY, IMAGES)  # what --overwrite deletes; nothing else in DIR is touched
N_EXAMPLES = 5  # skipped rows shown with their reason in the printed summary
MAX_SKIP_FRACTION = 0.5  # more skipped rows than this (of the rows in the subset) fails the conversion
N_REASONS = 3  # skip reasons named in a failed conversion's error


@dataclass
class ConvertReport:
    """What :func:`convert` did. ``complete``: the whole split was read (no ``limit`` stop), so
    ``rows_read`` can be checked against the published count (``expected_rows``)."""

    source: str
    split: str
    src: str
    out: str
    options: dict[str, Any]
    limit: int | None
    rows_read: int = 0
    n_samples: int = 0
    n_images: int = 0
    complete: bool = False
    expected_rows: int | None = None
    skipped: list[Skip] = field(default_factory=list)
    excluded: dict[str, int] = field(default_factory=dict)  # rows outside the subset, by reason

    @property
    def n_excluded(self) -> int:
        return sum(self.excluded.values())

    @property
    def skip_rate(self) -> float | None:
        """Skipped rows over the rows read that the subset includes (None: no such row)."""
        asked = self.rows_read - self.n_excluded
        return len(self.skipped) / asked if asked > 0 else None

    def failure(self) -> str | None:
        """Why this conversion is not a dataset (see the module docstring), or None. One line."""
        if self.rows_read == 0:
            return None  # an empty input: nothing to judge (the row-count check speaks for it)
        asked = self.rows_read - self.n_excluded
        if self.n_samples == 0:
            what = f"0 samples from {self.rows_read} rows"
            if self.skipped:
                what += f": {len(self.skipped)} rows skipped ({_percent(self.skip_rate)})"
            if self.n_excluded:
                what += (f"{',' if self.skipped else ':'} {self.n_excluded} outside the subset "
                         f"({'; '.join(self.excluded)})")
        elif self.skip_rate is not None and self.skip_rate > MAX_SKIP_FRACTION:
            what = (f"{len(self.skipped)} of {asked} rows skipped ({_percent(self.skip_rate)}), more than "
                    f"{_percent(MAX_SKIP_FRACTION)}")
        else:
            return None
        reasons = "; ".join(f"{n} x {kind} (e.g. {example.id}: {example.reason})"
                            for kind, n, example in self._reason_examples()[:N_REASONS])
        return (f"{self.source} {self.split}: {what}" + (f". Most common: {reasons}" if reasons else "")
                + f". So many unusable rows mean the wrong source, split, layout or release, not a dataset with "
                  f"a few bad rows; every skipped id and its reason: {Path(self.out) / SKIPPED} (no "
                  f"{DATA} was written)")

    def _reason_examples(self) -> list[tuple[str, int, Skip]]:
        """(reason kind, count, first skip of that kind), most frequent first."""
        first: dict[str, Skip] = {}
        for s in self.skipped:
            first.setdefault(_reason_kind(s.reason), s)
        return [(kind, n, first[kind]) for kind, n in self.skip_reasons().items()]

    @property
    def rows_match(self) -> bool | None:
        """Whether a complete split has the published number of rows (None: nothing to compare)."""
        if self.expected_rows is None or not self.complete:
            return None
        return self.rows_read == self.expected_rows

    def skip_reasons(self) -> dict[str, int]:
        """How many rows were skipped for each kind of reason (see :func:`_reason_kind`), most first."""
        return dict(Counter(_reason_kind(s.reason) for s in self.skipped).most_common())

    def count_check(self) -> CountCheck:
        """The samples written next to the paper's count for this benchmark and split, and why they differ."""
        facts = ConversionFacts(complete=self.complete, limit=self.limit, rows_read=self.rows_read,
                                expected_rows=self.expected_rows, n_skipped=len(self.skipped), excluded=self.excluded,
                                options=self.options, src=self.src)
        return check_count(self.source, self.split, self.n_samples, facts)

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "skipped"}
        return {**d, "n_skipped": len(self.skipped), "skip_rate": self.skip_rate, "n_excluded": self.n_excluded,
                "rows_match": self.rows_match, "skip_reasons": self.skip_reasons(),
                "paper_count": self.count_check().to_json()}

    def lines(self) -> list[str]:
        """A human summary, one fact per line."""
        rate = f" ({_percent(self.skip_rate)})" if self.skipped else ""
        out = [f"{self.source} {self.split}: {self.rows_read} rows read -> {self.n_samples} samples, "
               f"{self.n_images} images, {len(self.skipped)} rows skipped{rate} -> {self.out}"]
        for reason, n in self.excluded.items():
            out.append(f"{n} rows outside the subset: {reason}")
        if self.rows_match is False:
            out.append(f"warning: the published {self.source} {self.split} has {self.expected_rows} rows, "
                       f"this snapshot {self.rows_read}")
        elif self.rows_match:
            out.append(f"row count matches the published {self.expected_rows}")
        for reason, n in self.skip_reasons().items():
            out.append(f"  skipped {n}: {reason}")
        for s in self.skipped[:N_EXAMPLES]:
            out.append(f"  e.g. {s.id}: {s.reason}")
        if self.skipped:
            out.append(f"  (every skipped id and its reason: {Path(self.out) / SKIPPED})")
        out.append(self.count_check().line())
        return out


class ConversionFailed(ValueError):
    """A conversion that produced no usable dataset (:meth:`ConvertReport.failure`); ``report`` says what
    was read. A ValueError, so the CLI prints it as one error line and exits non-zero."""

    def __init__(self, message: str, report: ConvertReport):
        super().__init__(message)
        self.report = report


def _percent(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{100 * fraction:.0f}%"


def _reason_kind(reason: str) -> str:
    """The reason without its row-specific values, so skips can be grouped.

    >>> _reason_kind("box [0.0, 1.0, 99.0, 5.0] (xyxy px) lies outside the 64x48 image")
    'box lies outside the image'
    >>> _reason_kind("unknown answer letter 'E': the options are A, B, C, D")
    'unknown answer letter'
    """
    import re

    text = re.sub(r"\[[^\]]*\]|\([^)]*\)|'[^']*'|\d+x\d+|[-+]?\d+(\.\d+)?", "", reason).split(":")[0]
    return " ".join(text.split()) or reason


def _prepare_out(out: Path, overwrite: bool) -> None:
    """Refuse a non-empty ``out`` without ``overwrite``; with it, remove what a previous conversion recorded
    writing there (:mod:`vrh.runs.written`), refusing if anything of the user's is among :data:`ARTEFACTS`."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"--out {out} is not empty; pass --overwrite to replace a previous conversion "
                                  f"(it deletes only the {', '.join(ARTEFACTS)} vrh wrote)")
        written.remove_written(out, "--overwrite", only=ARTEFACTS)
    out.mkdir(parents=True, exist_ok=True)


def convert(name: str, src: str | Path, out: str | Path, *, split: str | None = None, limit: int | None = None,
            overwrite: bool = False, progress: bool = True, **options: Any) -> ConvertReport:
    """Convert source ``name``'s split ``split`` (default: the source's first) read from ``src`` into
    ``out``; stop after ``limit`` samples. ``options`` are the source's own (``None`` values are unset);
    one the source does not take is an error naming it."""
    source = get_source(name)
    options = {k: v for k, v in options.items() if v is not None and v is not False}
    extra = sorted(set(options) - set(source.option_names))
    if extra:
        takes = ", ".join(o.flag for o in source.option_specs) or "none"
        raise ValueError(f"option(s) {', '.join('--' + o.replace('_', '-') for o in extra)} do not apply to "
                         f"source {name!r} (its options: {takes})")
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    split = split or source.default_split
    src, out = Path(src).expanduser(), Path(out).expanduser()
    rows = source.read_rows(src, split, options)  # snapshot-level errors happen here, before any write
    _prepare_out(out, overwrite)
    report = ConvertReport(source=name, split=split, src=str(src.resolve()), out=str(out), options=options,
                           limit=limit, expected_rows=source.expected_rows.get(split))
    recorder = written.Recorder(out, shared=True)  # every file recorded before it is written: --overwrite's list
    recorder.add(DATA, SKIPPED, SUMMARY)
    ctx = RowContext(source=name, split=split, images=ImageStore(out / IMAGES, recorder), options=options)
    samples: list = []
    seen: set[str] = set()
    total = getattr(rows, "total", None)
    with _progress(limit or total, f"convert {name}", progress) as advance:
        report.complete = True
        for key, row in rows:
            if limit is not None and len(samples) >= limit:
                report.complete = False
                break
            report.rows_read += 1
            before = len(samples)
            try:
                new = source.convert_row(key, row, ctx)
                ids = [s.id for s in new]
                dup = sorted(set(ids) & seen) or sorted(i for i, c in Counter(ids).items() if c > 1)
                if dup:
                    raise SkipRow(f"duplicate id {dup[0]!r}")
            except NotInSubset as e:
                report.excluded[str(e)] = report.excluded.get(str(e), 0) + 1
            except (SkipRow, KeyError, TypeError, ValueError) as e:
                # SkipRow is the converter's own reason; the others are a malformed cell it did not foresee
                reason = str(e) if isinstance(e, SkipRow) else f"malformed row ({type(e).__name__}: {e})"
                report.skipped.append(Skip(id=ctx.sample_id(key), reason=reason))
            else:
                seen.update(ids)
                samples.extend(new[: None if limit is None else limit - len(samples)])
            advance(len(samples) - before if limit else 1)  # the bar counts samples up to --limit, else rows
    report.n_samples, report.n_images = len(samples), ctx.images.n_written
    failure = report.failure()
    # never through a link in --out (a planted skipped.jsonl or data.jsonl.tmp): vrh.runs.safe_paths
    safe_paths.write_atomic(out, out / SKIPPED, "".join(json.dumps(asdict(s), ensure_ascii=False) + "\n"
                                                        for s in report.skipped))
    summary = report.to_json() | ({"error": failure} if failure else {})
    safe_paths.write_atomic(out, out / SUMMARY, json.dumps(summary, indent=2) + "\n")
    if failure:
        recorder.close()
        written.remove_written(out, "a failed conversion", only=(IMAGES,))  # what the kept rows wrote: no dataset
        raise ConversionFailed(failure, report)
    recorder.close()
    write_dataset(samples, out / DATA, root=out)
    load_dataset(out / DATA)  # the written file must load: a failure here is a converter bug, not a bad row
    return report


def _progress(total: int | None, description: str, enabled: bool):
    """A progress bar when the total is known (parquet footers), else a no-op counter."""
    from contextlib import nullcontext

    from vrh.infra.console import progress

    if enabled and total:
        return progress(total, description)
    return nullcontext(lambda n=1: None)
