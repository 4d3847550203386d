"""The demo's report in a real browser (issue 18): headless Chromium at 700 px, no horizontal overflow,
every image loads.

Slow (the demo takes about a minute; Chromium must be installed: ``apt-get install -y chromium``)::

    python -m pytest -m slow tests/report/test_report_browser.py
    VRH_DEMO_RUN=runs/demo python -m pytest -m slow tests/report/test_report_browser.py   # reuse a demo run
    VRH_REPORT_SHOTS=/tmp/shots ...   # also save full-page screenshots to look at

The report is rebuilt here without ``--k``, so it also shows what the report reads from the runs.
"""

import os
import re
from pathlib import Path

import pytest

from vrh.analyses.reporting import build_report

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> Path:
    reuse = os.environ.get("VRH_DEMO_RUN")
    if reuse:
        return Path(reuse)
    from vrh.analyses import demo

    out = tmp_path_factory.mktemp("demo") / "run"
    demo.run(demo.Config(out=str(out)))
    return out


@pytest.mark.parametrize("width", [700, 1200])
def test_demo_report_fits_the_window_and_every_image_loads(demo_run, browser, shots_dir, tmp_path, width):
    from vrh.analyses.demo.analysis import SUBRUNS

    html = build_report([demo_run, *(demo_run / s for s in SUBRUNS)], tmp_path / "report")["html"]
    page = browser.check(html, width=width)
    assert page.viewport_width == width
    assert page.scroll_width <= width and page.too_wide == [], page.too_wide
    n_figures = len(re.findall(r'<img [^>]*src="data:image/png;base64,', html.read_text()))
    assert len(page.images) == n_figures >= 6  # heat map, histogram, 2 k-curves, outcomes, overlays
    assert all(i["loaded"] and i["natural_width"] > 0 and i["shown_width"] <= width for i in page.images), page.images
    if shots_dir:
        browser.screenshot(html, shots_dir / f"demo-report-{width}px.png", width=width)
