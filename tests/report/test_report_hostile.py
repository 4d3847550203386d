"""vrh report on hostile or odd input (issue: report security/robustness items 5, 6, 7, 13).

Run folder names, sample ids, expressions, config values and ``--title`` are user text: planted HTML or
Markdown must stay text in ``report.md``, ``$`` must not be read as matplotlib mathtext, a samples record
must not make the report embed (or choke on) a file the run does not name, and a report that fails midway
must leave the previous report as it was.
"""

import base64
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from vrh import runs
from vrh.analyses.reporting import build_report
from vrh.analyses.reporting import build_sections
from vrh.report.document import figures
from vrh.report.load import load_runs
from vrh.runs import written

L, H = 2, 3
RECTS = np.array([[x, y, x + 16, y + 16] for y in range(0, 48, 16) for x in range(0, 64, 16)], dtype=float)

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
SVG = "<svg onload=alert(1)>"
REMOTE = "![x](http://example.com/x.png)"
JSLINK = "[link](javascript:alert(1))"


def _png(path, color, size=(48, 64)):
    from PIL import Image

    Image.fromarray(np.full((*size, 3), color, dtype=np.uint8)).save(path)
    return path


def _detect(folder, records, *, data=None, model_type="toy"):
    """A finished detection run with one overlay per record (in record order)."""
    scores = np.arange(L * H, dtype=float).reshape(L, H) / 100  # (L, H); (1, 2) highest
    ranking = [[int(i) // H, int(i) % H] for i in np.argsort(-scores.ravel(), kind="stable")]
    rng = np.random.default_rng(0)
    config = {"command": "detect", "model": {"path": "/ckpt/tiny", "model_type": model_type},
              "detect_ids": [r["id"] for r in records], "eval_ids": []}
    if data is not None:
        config["data"] = {"path": str(data)}
    with runs.RunFolder(folder) as run:
        run.write_config(config)
        for r in records:
            run.append_sample({"task": "grounding", "gt_box": [20, 10, 44, 30], "outcome": "correct", **r})
        runs.write_head_scores(run, runs.HeadScores("out", L, H, len(records),
                                                    {"out": {"scores": scores.tolist(), "ranking": ranking}}))
        runs.write_overlays(run, {r["id"]: (rng.random((L, H, len(RECTS))), RECTS) for r in records})
        run.write_results({"n_scored": len(records)})
    return folder


def _dataset(folder, images):
    """A grounding JSONL naming ``{sample id: image path relative to folder}``."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": sid, "image": img, "task": "grounding", "expression": "a thing",
                         "box": [20, 10, 44, 30], "box_format": "xyxy"}) for sid, img in images.items()]
    (folder / "data.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "data.jsonl"


def _embedded_pngs(html):
    from PIL import Image

    out = []
    for data in re.findall(r'src="data:image/png;base64,([^"]+)"', html):
        with Image.open(io.BytesIO(base64.b64decode(data))) as im:
            out.append(np.asarray(im.convert("RGB")).astype(int))
    return out


def _pixels_near(pngs, color, tol=8):
    return sum(int((np.abs(p - np.array(color)).max(-1) <= tol).sum()) for p in pngs)


def _section_html(html, title):
    start = html.index(f">{title}</h2>")
    nxt = html.find("<h2>", start)
    return html[start:nxt if nxt >= 0 else len(html)]


# --- item 5: report.md is plain text where the user wrote text ----------------------------------------
class _Tags(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def test_markdown_report_renders_no_planted_html_images_or_links(tmp_path):
    from markdown_it import MarkdownIt

    payloads = [SCRIPT, IMG, SVG, REMOTE, JSLINK]
    det = _detect(tmp_path / f"{IMG} {SVG} {JSLINK}",  # a folder name cannot hold "/"
                  [{"id": f"{SVG} {REMOTE} | *x* _y_ `z` ~w~ # [a]: http://example.com", "expression": SCRIPT,
                    "image": "none.png"}],
                  model_type=SCRIPT)  # a config value
    odd = tmp_path / "odd"
    with runs.RunFolder(odd) as run:
        run.write_config({"command": "mystery"})
        run.write_results({SVG: JSLINK, "k": SCRIPT, "nested": {"x": REMOTE}})
    title = " ".join(payloads)
    paths = build_report([det, odd], tmp_path / "out", title=title)
    page = _Tags()
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])  # and GitHub's tables and ~~del~~
    page.feed(md.render(paths["md"].read_text(encoding="utf-8")))
    names = [t for t, _ in page.tags]
    assert "script" not in names and "svg" not in names and "iframe" not in names and "del" not in names, names
    assert not [(t, a) for t, attrs in page.tags for a in attrs if a.lower().startswith("on")]
    srcs = [attrs.get("src", "") for t, attrs in page.tags if t == "img"]
    assert srcs and all(re.fullmatch(r"figures/[A-Za-z0-9._-]+\.png", s) for s in srcs), srcs
    hrefs = [attrs.get("href", "") for t, attrs in page.tags if t == "a"]
    assert not [h for h in hrefs if re.match(r"\s*[A-Za-z][A-Za-z0-9+.-]*:", h)], hrefs
    text = "".join(page.text)
    for p in payloads:
        assert p in text, p  # still there for the reader, as text
    assert "| *x* _y_ `z` ~w~ # [a]: http://example.com" in text  # no emphasis, code, cell or link made of it
    # the report's own Markdown still works: title, headings, tables, figures
    assert names.count("h1") == 1 and "h2" in names and "table" in names and len(srcs) == 3


# --- item 6: "$" in user text is not mathtext --------------------------------------------------------
def test_dollar_signs_in_names_and_expressions_do_not_break_figures(tmp_path, monkeypatch):
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    drawn = []
    real = Figure.savefig

    def keep(fig, *a, **kw):
        out = real(fig, *a, **kw)
        drawn.extend(fig.findobj(Text))
        return out

    monkeypatch.setattr(Figure, "savefig", keep)
    name, expr = r"DET$\frac{$x", r"the $\sqrt{$ object"
    det = _detect(tmp_path / name, [{"id": "s$0$", "expression": expr, "image": "none.png"}])
    html = build_report([det], tmp_path / "out", title=r"a $\alpha$ report")["html"].read_text()
    assert name in html and r"a $\alpha$ report" in html
    texts = [t.get_text() for t in drawn]
    assert any(name in t for t in texts) and any(expr in t for t in texts)
    # every text is drawn as written: nothing parsed as math, and no axis writes mathtext markup of its own
    assert not [t.get_text() for t in drawn if "$" in t.get_text() and t.get_parse_math()]
    assert not [t for t in texts if "\\mathdefault" in t or "\\times" in t], texts


# --- item 7: only images the run names are embedded --------------------------------------------------
MAGENTA, CYAN, YELLOW = (255, 0, 255), (0, 255, 255), (255, 255, 0)


def test_overlays_embed_only_images_the_run_names(tmp_path):
    outside = _png(tmp_path / "outside.png", MAGENTA)  # a real image, but neither in a dataset nor in a run
    data = _dataset(tmp_path / "data", {"good": "good.png"})
    good = _png(tmp_path / "data" / "good.png", CYAN)
    det = _detect(tmp_path / "det", [{"id": "good", "image": str(outside)},  # the dataset's image is drawn
                                     {"id": "passwd", "image": "/etc/passwd"},
                                     {"id": "outside", "image": "../outside.png"},
                                     {"id": "torn", "image": "torn.png"}], data=data)
    (det / "torn.png").write_bytes(good.read_bytes()[:50])  # header, a cut-off IDAT
    det2 = _detect(tmp_path / "det2", [{"id": "inrun", "image": "inrun.png"}, {"id": "linked", "image": "link.png"}])
    _png(det2 / "inrun.png", YELLOW)
    (det2 / "link.png").symlink_to(outside)  # inside by name, outside by target

    html = build_report([det, det2], tmp_path / "out")["html"].read_text()
    sec = _section_html(html, "Attention overlays")
    pngs = _embedded_pngs(sec)
    assert len(pngs) == 6  # every overlay is drawn, with or without its image
    assert _pixels_near(pngs, MAGENTA) == 0  # the outside image is not in the report
    assert _pixels_near(pngs, CYAN) > 200 and _pixels_near(pngs, YELLOW) > 200  # the named ones are
    skip = re.search(r"4 overlay image\(s\) not embedded: ([^<]*)</p>", sec)
    assert skip, sec[-2000:]
    line = skip.group(1)
    for sid in ("det/passwd", "det/outside", "det2/linked"):
        assert f"{sid} (not named by the run" in line, line
    assert "det/torn (unreadable" in line and "good" not in line and "inrun" not in line


def test_overlay_figure_names_are_short_and_unique(tmp_path):
    long_id = "x" * 10_000
    det = _detect(tmp_path / "det", [{"id": "a b", "image": ""}, {"id": "a_b", "image": ""},
                                     {"id": long_id, "image": ""}])
    names = [f.name for f in figures(build_sections(load_runs([det]), None))]
    overlays = [n for n in names if "overlay" in n]
    assert len(overlays) == 3 and len(set(names)) == len(names), names
    assert max(map(len, names)) <= 120
    paths = build_report([det], tmp_path / "out")
    links = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", paths["md"].read_text())
    assert len(links) == len(set(links)) == len(names)
    assert all((tmp_path / "out" / link).is_file() for link in links)


# --- item 13: a failed report leaves the previous one as it was --------------------------------------
def _stability(folder, shift):
    with runs.RunFolder(folder) as run:
        run.write_config({"command": "stability", "model": "tiny"})
        run.write_results({"n_values": [5, 10, 50], "topk_overlap_mean": [0.5 - shift, 0.7, 0.95],
                           "k": 20, "token_choice": {"rand1_accuracy": 0.3 + shift, "out_accuracy": 0.1,
                                                     "random_accuracy": 0.85}})
    return folder


def _snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_report_that_fails_midway_leaves_the_previous_report_untouched(tmp_path, monkeypatch):
    out = tmp_path / "out"
    build_report([_stability(tmp_path / "a" / "stab", 0.0)], out, title="first")
    before = _snapshot(out)
    assert {"report.md", "report.html"} <= set(before) and any(k.startswith("figures/") for k in before)
    second = _stability(tmp_path / "b" / "stab", 0.2)  # same names, other numbers: other bytes
    n_files = len([k for k in before if k != written.MANIFEST])  # the report's own files; the record is appended
    for fail_at in range(1, n_files + 1):
        calls = []

        def failing(real):
            def open_write(root, path, *a, **kw):  # every report file is written through vrh.runs.safe_paths
                calls.append(path)
                f = real(root, path, *a, **kw)
                if len(calls) == fail_at:
                    f.write(b"torn")  # half a file, then the disk is full
                    f.close()
                    raise OSError(28, "No space left on device")
                return f
            return open_write

        from vrh.runs import safe_paths

        with monkeypatch.context() as m:
            m.setattr(safe_paths, "open_write", failing(safe_paths.open_write))
            with pytest.raises(OSError, match="No space left"):
                build_report([second], out, title="second")
        assert _snapshot(out) == before, f"write {fail_at} of {n_files} failed"
        assert not list(out.rglob("*.tmp"))
    build_report([second], out, title="second")  # and without a fault it replaces every file
    after = _snapshot(out)
    assert set(after) == set(before) and all(after[k] != before[k] for k in before if k != written.MANIFEST)
