"""The report: every section with real numbers, safe rendering, a real browser, `snakemake
--report`, and reruns that redo only what changed."""

import json
import re
import shutil
from pathlib import Path

from conftest import REPO, model_artifact_paths, snakemake

from infbench.core.artifacts import load_model_artifacts
from infbench.report import build_context, render
from infbench.report.figures import figure

TEMPLATE = REPO / "report" / "report.html.j2"

SCREENSHOT_DIR = REPO / "test-output"
ATTACK = "<script>alert(1)</script>"


def jobs_of(dry_run_stdout: str) -> set[str]:
    return set(re.findall(r"^rule (\w+):", dry_run_stdout, flags=re.M)) - {"all"}


def test_report_has_every_section_with_numbers(tiny_run):
    html = (tiny_run / "results/report.html").read_text()
    for heading in (
        "Validity checks",
        "Overview",
        "1–2. Hugging Face baseline and vLLM offline",
        "3. The KV-cache problem",
        "4. Paging: what the study left out",
        "5. The OpenAI-compatible server under load",
        "Is the client exact? vLLM's benchmark client beside ours",
        "Tuning grid",
        "Provenance",
    ):
        assert heading in html, heading
    assert "reproduced exactly" in html and "The study's figures" in html
    images = re.findall(r'<img src="(data:image/png;base64,[^"]+)"', html)
    assert len(images) >= 7
    assert "http://" not in html.replace("http://127.0.0.1", "") and "<link" not in html  # nothing to fetch
    assert re.search(
        r"vLLM/HF tok/s, workload_continuous vs workload_sequential</td><td class=\"text\">\d+\.\d\d×", html
    )
    # Two passes of 16 requests per level, intervals across them, and p99 left out (32 < 100).
    assert "2 × 16" in html and "Each level ran 2 times" in html
    assert re.search(r"\[\d+\.\d, \d+\.\d\]", html)


def test_unsafe_text_is_escaped(tiny_run, tmp_path):
    artifacts = load_model_artifacts(model_artifact_paths(tiny_run))
    artifacts["workload"][0]["prompt"] = ATTACK
    artifacts["server"]["study_request"]["cold"]["text"] = ATTACK
    html = render_page(build_context({"tiny": artifacts}, {"note": ATTACK}, []))
    assert ATTACK not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3
    (tmp_path / "attack.html").write_text(html)
    dialogs, errors = open_in_browser(tmp_path / "attack.html", tmp_path / "attack.png")
    assert dialogs == [] and errors == []


def open_in_browser(page_path: Path, screenshot: Path) -> tuple[list, list]:
    """Open a page in Debian's headless Chromium through Playwright; return (dialogs, console
    errors) and keep a full-page screenshot."""
    from playwright.sync_api import sync_playwright

    dialogs, errors = [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium"),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(page_path.resolve().as_uri(), wait_until="load")
        broken = page.evaluate("Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).length")
        if broken:
            errors.append(f"{broken} image(s) did not load")
        clipped = page.evaluate(
            "Array.from(document.querySelectorAll('img[data-clipped-text]'))"
            ".map(i => i.alt + ': ' + i.dataset.clippedText)"
        )
        errors += [f"text cut off at the edge of a figure: {item}" for item in clipped]
        page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    return dialogs, errors


def test_report_in_a_real_browser(tiny_run):
    SCREENSHOT_DIR.mkdir(exist_ok=True)
    screenshot = SCREENSHOT_DIR / "report.png"
    dialogs, errors = open_in_browser(tiny_run / "results/report.html", screenshot)
    assert errors == [] and dialogs == []
    assert screenshot.stat().st_size > 50_000


def test_snakemake_report_builds(tiny_run):
    snakemake(tiny_run, "--report", "snakemake-report.html")
    text = (tiny_run / "snakemake-report.html").read_text(errors="replace")
    assert "report.html" in text and "load.json" in text


def test_figure_text_cut_off_is_detected():
    """The clipping check can fail: a label far longer than its figure is reported."""
    import pandas as pd

    def draw(ax):
        ax.plot([0, 1], [0, 1])
        ax.set_ylabel("a label much too long to fit the height of this small figure " * 3)

    clipped = figure("too long", draw, pd.DataFrame(), size=(3, 2)).clipped_text
    assert clipped and clipped[0].startswith("a label much too long")
    assert figure("fits", lambda ax: ax.plot([0, 1], [0, 1]), pd.DataFrame()).clipped_text == []


def test_several_models_side_by_side(tiny_run):
    artifacts = load_model_artifacts(model_artifact_paths(tiny_run))
    other = json.loads(json.dumps(artifacts))
    other["model"]["name"] = "tiny-b"
    html = render_page(build_context({"tiny": artifacts, "tiny-b": other}, {}, []))
    overview = html.split('id="overview"')[1].split("</table>")[0]
    assert "<th>tiny</th>" in overview and "<th>tiny-b</th>" in overview
    assert 'id="model-tiny"' in html and 'id="model-tiny-b"' in html


def render_page(context: dict) -> str:
    return render(context, TEMPLATE)


def test_no_figure_of_the_report_cuts_off_its_text(tiny_run):
    context = build_context({"tiny": load_model_artifacts(model_artifact_paths(tiny_run))}, {}, [])
    figures = [
        f
        for s in context["sections"]
        for part in (s["offline"], s["allocator"], s["serving"])
        if part
        for f in part["figures"]
    ]
    assert len(figures) >= 7
    assert {f.title: f.clipped_text for f in figures if f.clipped_text} == {}
