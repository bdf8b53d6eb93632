"""The results page in a real headless browser (Debian's chromium): the claims table sits on the
first screen, and every study section and every figure is laid out visibly, not only present in
the HTML. Skipped, saying why, where no Chromium is installed (.ci/run installs it as root)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pillm.paper.results_page import write_results_page
from tests.paper.test_results_page import page_inputs

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
BROWSER = next((b for b in BROWSERS if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no headless Chromium on PATH (apt-get install chromium; .ci/run does so as root)",
)
WINDOW = (1280, 900)

# Measures the laid-out page once every image has decoded and writes the result into the DOM,
# which --dump-dom prints: the box of the claims table, of each study section and of each
# figure, and whether the element at a figure's centre (scrolled into view) is that figure.
MEASURE = """
<script>
window.addEventListener("load", () => setTimeout(() => {
  const box = (el) => { const r = el.getBoundingClientRect();
    const s = getComputedStyle(el);
    return {top: r.top + scrollY, width: r.width, height: r.height,
            shown: s.display !== "none" && s.visibility === "visible" && +s.opacity > 0}; };
  const out = {viewport: [innerWidth, innerHeight],
               claims: box(document.getElementById("claims-table")),
               sections: {}, figures: {}};
  document.querySelectorAll("section.study").forEach((s) => out.sections[s.id] = box(s));
  document.querySelectorAll("figure").forEach((f) => {
    const img = f.querySelector("img"), cap = f.querySelector("figcaption");
    img.scrollIntoView({block: "center"});
    const r = img.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    out.figures[f.id] = Object.assign(box(img), {natural: img.naturalWidth,
      on_top: hit === img, caption: box(cap)});
  });
  scrollTo(0, 0);
  const pre = document.createElement("pre"); pre.id = "measure";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
}, 0));
</script>
"""


def chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--window-size={WINDOW[0]},{WINDOW[1]}", *args]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[dict, Path]:
    args = page_inputs(tmp_path_factory.mktemp("browser"))
    write_results_page(**args)
    return args, Path(args["out"])


@pytest.fixture(scope="module")
def measured(page) -> dict:
    args, path = page
    probe = path.with_name("measured.html")
    probe.write_text(path.read_text().replace("</body>", MEASURE + "</body>"))
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri()).stdout
    m = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
    assert m, "the measuring script did not run:\n" + dom[-1500:]
    return json.loads(html.unescape(m.group(1)))


def test_claims_table_is_on_the_first_screen(measured):
    claims, (width, height) = measured["claims"], measured["viewport"]
    assert claims["shown"] and claims["width"] > 0.6 * width and claims["height"] > 200
    assert claims["top"] < height, "the claims table starts below the first screen"


def test_every_study_section_is_laid_out(page, measured):
    args, _ = page
    assert list(measured["sections"]) == list(dict(args["params"]["sections"]))
    for wing, box in measured["sections"].items():
        assert box["shown"] and box["width"] > 600 and box["height"] > 60, (wing, box)


def test_every_figure_is_visible_at_a_readable_size(page, measured):
    args, _ = page
    assert [f.removeprefix("fig-") for f in measured["figures"]] == [
        Path(p).stem for p in args["figures"]
    ]
    for fig, box in measured["figures"].items():
        assert box["natural"] > 0, f"{fig}: the image did not decode"
        assert box["shown"] and box["on_top"], f"{fig}: hidden or covered ({box})"
        # never shrunk below 40 em or its own width (the figures are 400 px wide here)
        assert box["width"] >= min(box["natural"], 600) - 1, (fig, box)
        assert box["caption"]["shown"] and box["caption"]["height"] > 10, (fig, box)


def test_screenshot_of_the_landing_screen(page, tmp_path):
    _, path = page
    shot = tmp_path / "landing.png"
    chromium(f"--screenshot={shot}", path.as_uri())
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 20_000  # a rendered page, not blank
