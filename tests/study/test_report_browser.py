"""The study report in a real browser (issue 27): headless Chromium at 700 and 1200 px shows every study
section and figure, every image loads, nothing runs off the page sideways.

Slow (the small study takes about a minute; Chromium must be installed: ``apt-get install -y chromium``;
skipped without it)::

    python -m pytest -m slow tests/study/test_report_browser.py
    VRH_REPORT_SHOTS=/tmp/shots ...   # also save full-page screenshots to look at
"""

import html as html_lib
import re

import pytest

from tests.report.conftest import browser, shots_dir  # noqa: F401  (the Chromium page check's fixtures)
from vrh.analyses.reporting import build_report

pytestmark = pytest.mark.slow

STUDY_SECTIONS = ("Study small", "Universality: k-curves per model and benchmark", "All models at k = 2",
                  "Cross-task: VQA under grounding VRHs", "Sparsity per model", "Transfer between models",
                  "Design space and methods: A on world", "Top heads per model and benchmark",
                  "Failure decomposition at k = 2", "Stability (Fig. 8b-c)")
FIGURE_SECTIONS = ("Universality", "All models at k", "Sparsity per model", "Transfer between models",
                   "Design space and methods: A on world", "Failure decomposition", "Stability (Fig. 8b-c)")


def _title(chunk: str) -> str:
    """The plain text of the first <h2> in ``chunk``."""
    return html_lib.unescape(re.sub(r"<[^>]+>", "", re.search(r"<h2[^>]*>(.*?)</h2>", chunk, re.S).group(1)))


@pytest.fixture(scope="module")
def study_report(small_study, tmp_path_factory):
    _, out = small_study
    return build_report([out], tmp_path_factory.mktemp("study_report"))["html"]


@pytest.mark.parametrize("width", [700, 1200])
def test_study_report_shows_every_section_and_figure_and_every_image_loads(study_report, browser, shots_dir,
                                                                           width):
    text = study_report.read_text()
    h2 = [_title(c) for c in re.split(r"(?=<h2[ >])", text)[1:]]
    for title in STUDY_SECTIONS:
        assert any(t.startswith(title) for t in h2), (title, h2)
    assert "Other runs" not in h2  # the study folder's bookkeeping is no run
    assert h2.index(next(t for t in h2 if t.startswith("Stability (Fig"))) < h2.index("Summary")  # study first
    page = browser.check(study_report, width=width)
    assert page.scroll_width <= width and page.too_wide == [], page.too_wide
    n_figures = len(re.findall(r'<img [^>]*src="data:image/png;base64,', text))
    assert len(page.images) == n_figures > len(FIGURE_SECTIONS)  # the study's figures, then every cell's
    assert all(i["loaded"] and i["natural_width"] > 0 and 0 < i["shown_width"] <= width for i in page.images), [
        i for i in page.images if not (i["loaded"] and 0 < i["shown_width"] <= width)]
    chunks = {_title(c): c for c in re.split(r"(?=<h2[ >])", text)[1:]}  # each h2 to the next
    for title in FIGURE_SECTIONS:  # each study figure under its own heading
        chunk = next(c for t, c in chunks.items() if t.startswith(title))
        assert chunk.count('<img ') == 1 and 'src="data:image/png;base64,' in chunk, title
    if shots_dir:
        browser.screenshot(study_report, shots_dir / f"study-report-{width}px.png", width=width)
