"""A headless-Chromium page check for report tests, driving the system's /usr/bin/chromium directly.

No browser download and no Python browser package: a copy of the page gets a small script that, once the
page has loaded, measures it (document and element widths against the window, every image's natural
size) and writes the result as JSON into an attribute of <body>; ``chromium --headless --dump-dom`` prints
the DOM after the script ran. The report itself stays script-free; only the probed copy carries the script.

Install Chromium with ``apt-get install -y chromium`` (Debian); tests that use the ``browser`` fixture
are skipped where no Chromium is installed. ``VRH_REPORT_SHOTS=DIR`` also saves full-page screenshots.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars", "--mute-audio", "--force-device-scale-factor=1"]

PROBE = """<script>
window.addEventListener('load', function () {
  var de = document.documentElement, vw = de.clientWidth, wide = [];
  document.querySelectorAll('body *').forEach(function (e) {
    var r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > vw + 0.5)
      wide.push(e.tagName + ' right=' + Math.round(r.right) + ' ' + (e.alt || e.textContent || '').slice(0, 50));
  });
  var images = Array.prototype.map.call(document.images, function (i) {
    return {alt: i.alt, loaded: i.complete && i.naturalWidth > 0, natural_width: i.naturalWidth,
            shown_width: Math.round(i.getBoundingClientRect().width)};
  });
  document.body.setAttribute('data-probe', JSON.stringify({viewport_width: vw, scroll_width: de.scrollWidth,
    page_height: de.scrollHeight, too_wide: wide.slice(0, 30), images: images}));
});
</script>"""


@dataclass
class PageCheck:
    viewport_width: int
    scroll_width: int  # > viewport_width: the page scrolls sideways
    page_height: int
    too_wide: list[str]  # elements whose right edge lies beyond the window
    images: list[dict]


class Browser:
    def __init__(self, exe: str, tmp: Path):
        self.exe, self.tmp = exe, tmp

    def _run(self, args: list[str], width: int, height: int) -> str:
        profile = self.tmp / f"profile-{len(list(self.tmp.glob('profile-*')))}"
        cmd = [self.exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr[-2000:]}")
        return out.stdout

    def check(self, page: Path, width: int = 700) -> PageCheck:
        """Load ``page`` in a ``width``-px-wide window and measure it (see the module docstring)."""
        text = Path(page).read_text(encoding="utf-8")
        probed = self.tmp / f"probed-{Path(page).stem}.html"
        probed.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
        dom = self._run(["--virtual-time-budget=20000", "--dump-dom", probed.as_uri()], width, 900)
        m = re.search(r'data-probe="([^"]*)"', dom)
        if not m:
            raise RuntimeError(f"the probe did not run in {probed}; DOM starts: {dom[:300]!r}")
        return PageCheck(**json.loads(html.unescape(m.group(1))))

    def screenshot(self, page: Path, png: Path, width: int = 700, height: int | None = None) -> Path:
        """A screenshot of the whole page (``height``: the page's own, measured first, unless given)."""
        height = height or min(self.check(page, width).page_height + 20, 30000)
        self._run(["--virtual-time-budget=20000", f"--screenshot={png}", Path(page).resolve().as_uri()],
                  width, height)
        return png


@pytest.fixture(scope="session")
def browser(tmp_path_factory) -> Browser:
    exe = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"), "/usr/bin/chromium")
                if p and os.access(p, os.X_OK)), None)
    if exe is None:
        pytest.skip("no Chromium installed (Debian: apt-get install -y chromium)")
    return Browser(exe, tmp_path_factory.mktemp("chromium"))


@pytest.fixture(scope="session")
def shots_dir() -> Path | None:
    """Where to save screenshots for a human to look at (``VRH_REPORT_SHOTS``), or None."""
    d = os.environ.get("VRH_REPORT_SHOTS")
    if not d:
        return None
    Path(d).mkdir(parents=True, exist_ok=True)
    return Path(d)
