"""A tiny document model (sections of paragraphs, tables and figures) rendered twice: as one
self-contained HTML page and as Markdown with PNGs beside it.

Section renderers build these blocks once; the two writers below are the only places that know HTML or
Markdown. All text of the model is plain text, and much of it is the user's (run folder names, sample
ids, expressions, config values, the title), so both writers escape every piece of it: the HTML writer
with :func:`html.escape`, the Markdown writer with :func:`md_text`, so that planted ``<script>``,
``![x](http://...)`` or ``[a](javascript:...)`` renders as those characters and never as HTML, an image
or a link. The Markdown writer returns the figure files instead of writing them, so that the caller can
write a whole report at once (:mod:`vrh.report.build`). The HTML writer embeds every figure as a base64
``data:`` URI with inline CSS and no scripts, fonts or links to anywhere, so the page can be mailed,
archived or opened offline and still show everything. Every table fits a 700-px-wide window without scrolling sideways:
cells holding a long unbroken token (a path, a hash, a timestamp) may break anywhere (``overflow-wrap:
anywhere`` also lowers the table's minimum width), numbers never break, words break only between them,
and tables tighten on narrow windows.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field


@dataclass
class Text:
    text: str
    muted: bool = False
    warn: bool = False  # something the reader must not miss (an unfinished run, a control that is not random)


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Fig:
    name: str  # file stem, unique within the report
    png: bytes
    caption: str = ""


@dataclass
class Section:
    title: str
    blocks: list = field(default_factory=list)
    level: int = 2

    def add(self, *blocks) -> "Section":
        self.blocks.extend(b for b in blocks if b is not None)
        return self

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-") or "section"


_NUMERIC = re.compile(r"^[-+]?\d[\d.,eE+-]*( ± [\d.]+)?( ?%)?$")


def numeric_columns(t: Table) -> list[bool]:
    """Columns whose every filled cell is a number (dash = missing): right-aligned, text left-aligned."""
    out = []
    for j in range(len(t.columns)):
        cells = [str(r[j]) for r in t.rows if j < len(r) and str(r[j]) not in ("", "–")]
        out.append(bool(cells) and all(_NUMERIC.match(c) for c in cells))
    return out


def slug(text: str, limit: int = 80) -> str:
    """``text`` as a file-name-safe stem of at most ``limit`` characters: a file name holds 255 bytes and a
    sample id can be kilobytes. Different texts may share a slug; names that must differ add an index.

    >>> slug("run 1/s0"), len(slug("x" * 10_000))
    ('run_1_s0', 80)
    """
    return (re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x")[:limit]


CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0 auto;max-width:1200px;
padding:1em 2em;color:#222;line-height:1.45}
h1{border-bottom:3px solid #d62728;padding-bottom:.2em}
h2{border-bottom:1px solid #ccc;padding-bottom:.15em;margin-top:2em}
h3{margin-bottom:.3em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em;max-width:100%}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top;overflow-wrap:break-word}
td.brk{overflow-wrap:anywhere}
th{background:#f3f3f3}
.n{text-align:right;font-variant-numeric:tabular-nums}
td.n{white-space:nowrap}
caption{caption-side:top;text-align:left;font-weight:600;padding:.3em 0}
figure{margin:.8em 0 1.6em}
figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85em;color:#555;margin-top:.3em}
.muted{color:#777;font-size:.9em}
.warn{background:#fff4e5;border-left:4px solid #d62728;padding:.4em .8em;font-weight:600}
nav ul{columns:2;font-size:.9em}
code{background:#f5f5f5;padding:0 .2em}
@media (max-width:800px){body{padding:.5em 1em}table{font-size:.8em}th,td{padding:.2em .35em}nav ul{columns:1}}
"""


LONG_TOKEN = 16  # characters without a space beyond which a cell may break anywhere (paths, hashes, times)


def _cell_class(text, numeric: bool) -> str:
    if numeric:
        return ' class="n"'
    return ' class="brk"' if max(map(len, str(text).split()), default=0) > LONG_TOKEN else ""


def _html_block(b) -> str:
    if isinstance(b, Text):
        if b.warn:
            return f'<p class="warn">Warning: {html.escape(b.text)}</p>'
        cls = ' class="muted"' if b.muted else ""
        return f"<p{cls}>{html.escape(b.text)}</p>"
    if isinstance(b, Table):
        cap = f"<caption>{html.escape(b.caption)}</caption>" if b.caption else ""
        num = numeric_columns(b) + [False] * 64
        head = "".join(f"<th{_cell_class('', num[j])}>{html.escape(str(c))}</th>" for j, c in enumerate(b.columns))
        body = "".join("<tr>" + "".join(f"<td{_cell_class(c, num[j])}>{html.escape(str(c))}</td>"
                                        for j, c in enumerate(r)) + "</tr>" for r in b.rows)
        return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    if isinstance(b, Fig):
        data = base64.b64encode(b.png).decode("ascii")
        alt = html.escape(b.caption or b.name, quote=True)
        cap = f"<figcaption>{html.escape(b.caption)}</figcaption>" if b.caption else ""
        return f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">{cap}</figure>'
    if isinstance(b, Section):
        return _html_section(b)
    raise TypeError(f"unknown block {type(b).__name__}")


def _html_section(s: Section) -> str:
    lv = min(max(s.level, 2), 4)
    inner = "\n".join(_html_block(b) for b in s.blocks)
    return f'<section id="{s.anchor}"><h{lv}>{html.escape(s.title)}</h{lv}>\n{inner}</section>'


def render_html(title: str, intro: list, sections: list[Section]) -> str:
    toc = "".join(f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections)
    body = "\n".join(_html_block(b) for b in intro) + f"<nav><ul>{toc}</ul></nav>\n"
    body += "\n".join(_html_section(s) for s in sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n"
            f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")


_MD_PUNCT = re.compile(r"([\\`*\[\]!|~#])")  # what builds links, images, emphasis, code, cells, headings
_MD_UNDERSCORES = re.compile(r"_+")  # emphasis too, except between two letters or digits (snake_case)
_MD_LIST = re.compile(r"^(\d{1,9}(?=[.)])|(?=[-+]))")  # a paragraph starting so would be a list item


def md_text(text) -> str:
    r"""Plain text as Markdown that renders as exactly that text, on one line: ``& < >`` as HTML entities
    (no raw HTML, no ``<...>`` autolink) and the punctuation that builds links, images, emphasis, code
    spans, table cells and headings backslash-escaped.

    >>> print(md_text("<img src=x onerror=alert(1)> ![x](http://e/x.png) a|b *c* _d_ p_img"))
    &lt;img src=x onerror=alert(1)&gt; \!\[x\](http://e/x.png) a\|b \*c\* \_d\_ p_img
    """
    one_line = re.sub(r"[\r\n]+", " ", str(text)).strip()  # leading blanks would make a code block
    return _MD_UNDERSCORES.sub(_md_underscores, _MD_PUNCT.sub(r"\\\1", html.escape(one_line, quote=False)))


def _md_underscores(m: re.Match) -> str:
    s, i, j = m.string, m.start(), m.end()
    inside_word = 0 < i and j < len(s) and s[i - 1].isalnum() and s[j].isalnum()  # never emphasis (CommonMark)
    return m.group() if inside_word else "\\_" * (j - i)


def _md_paragraph(text) -> str:
    """:func:`md_text` of a paragraph, with a backslash where it would start a list (``- x``, ``1. x``)."""
    return _MD_LIST.sub(r"\1\\", md_text(text), count=1)


def _md_block(b, rel: str, out: list[str], files: dict[str, bytes]) -> None:
    if isinstance(b, Text):
        out.append(f"> **Warning:** {md_text(b.text)}" if b.warn else f"*{md_text(b.text)}*" if b.muted
                   else _md_paragraph(b.text))
    elif isinstance(b, Table):
        if b.caption:
            out.append(f"**{md_text(b.caption)}**\n")
        lines = ["| " + " | ".join(md_text(c) for c in b.columns) + " |",
                 "|" + "|".join("---:" if x else "---" for x in numeric_columns(b)) + "|"]
        lines += ["| " + " | ".join(md_text(c) for c in r) + " |" for r in b.rows]
        out.append("\n".join(lines))
    elif isinstance(b, Fig):
        base = slug(b.name, 200)  # names are slugs already (<= 80 + suffix); 255 bytes hold "-2.png.tmp" too
        stem, n = base, 2
        while f"{stem}.png" in files:  # two figures of one name: the second would replace the first
            stem, n = f"{base}-{n}", n + 1
        files[f"{stem}.png"] = b.png
        out.append(f"![{md_text(b.caption or b.name)}]({rel}/{stem}.png)")
        if b.caption:
            out.append(f"*{md_text(b.caption)}*")
    elif isinstance(b, Section):
        out.append("#" * min(max(b.level, 2), 4) + " " + md_text(b.title))
        for c in b.blocks:
            _md_block(c, rel, out, files)
    else:
        raise TypeError(f"unknown block {type(b).__name__}")


def render_markdown(title: str, intro: list, sections: list[Section],
                    rel: str = "figures") -> tuple[str, dict[str, bytes]]:
    """Markdown text, linking each figure as ``rel/<name>.png``, and ``{file name: PNG bytes}`` of those
    figures for the caller to write into ``rel`` (nothing is written here)."""
    out, files = [f"# {md_text(title)}"], {}
    for b in intro:
        _md_block(b, rel, out, files)
    for s in sections:
        _md_block(s, rel, out, files)
    return "\n\n".join(out) + "\n", files


def figures(sections: list) -> list[Fig]:
    """Every figure in document order (sections nest)."""
    found: list[Fig] = []
    for b in sections:
        if isinstance(b, Fig):
            found.append(b)
        elif isinstance(b, Section):
            found.extend(figures(b.blocks))
    return found
