"""The report: every section with real numbers, safe rendering, a real browser, `snakemake
--report`, and reruns that redo only what changed."""

import fnmatch
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import jinja2.meta
import pandas as pd
from conftest import REPO, model_artifact_paths, snakemake
from markupsafe import escape

from infbench.core.artifacts import load_model_artifacts
from infbench.report import build_context, render
from infbench.report.figures import figure
from infbench.report.overview import answer, pareto_front, speed_figure, speed_points
from infbench.report.render import environment
from infbench.stages import SECTION, SECTIONS

TEMPLATE = REPO / "report" / "report.html.j2"
TEMPLATES = REPO / "report"
# What rule html_report declares besides the page itself (workflow/rules/report.smk).
DECLARED_PARTIALS = ("macros.html.j2", "sections/*.html.j2", "parts/*.html.j2", "style.css")

SCREENSHOT_DIR = REPO / "test-output"
ATTACK = "<script>alert(1)</script>"


def jobs_of(dry_run_stdout: str) -> set[str]:
    return set(re.findall(r"^rule (\w+):", dry_run_stdout, flags=re.M)) - {"all"}


def test_report_has_every_section_with_numbers(tiny_run):
    html = (tiny_run / "results/report.html").read_text()
    for heading in (
        "The answer",
        "Validity checks",
        "Overview",
        "<h3>1–2. Hugging Face baseline and vLLM offline",
        "<h3>3. The KV-cache problem",
        "<h3>4. Paging: what the study left out",
        "<h3>5. The OpenAI-compatible server under load",
        "<h3>5.1. Is the client exact? vLLM&#39;s benchmark client beside ours",
        "<h3>5.2. Prefix caching off and on",
        "<h3>6. How many users within the SLO",
        "<h3>7. The study&#39;s 4.8× on vLLM itself",
        "<h3>8. Distance to the hardware",
        "Provenance",
    ):
        assert heading in html, heading
    # Every section of the registry, in its order, under its number and title (the live paging
    # stage's title gives the study's ratio as its artifact does). The tiny run leaves tuning off;
    # its section is rendered in tests/test_tuning.py.
    shown = [section for section in SECTIONS if section.name != "tuning"]
    headings = re.findall(r"<h3>([\d.–]+)\. ", html)
    assert headings == [section.number for section in shown]
    for section in shown:
        if section.name != "paging_live":
            assert f"<h3>{escape(section.number + '. ' + section.title)}</h3>" in html, section.name
    assert not run_together(html)
    assert "reproduced exactly" in html and "The study's figures" in html
    images = re.findall(r'<img src="(data:image/png;base64,[^"]+)"', html)
    assert len(images) >= 7
    assert "http://" not in html.replace("http://127.0.0.1", "") and "<link" not in html  # nothing to fetch
    assert re.search(
        r"vLLM/HF tok/s, workload_continuous vs workload_sequential</td><td class=\"text\">\d+\.\d\d×", html
    )
    # Two windowed passes per level, intervals across them.
    assert "counted / sent" in html and "Each level ran 2 times" in html and "steady-state window" in html
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
        unreadable = page.evaluate(
            "Array.from(document.querySelectorAll('img[data-unreadable-text]'))"
            ".map(i => i.alt + ': ' + i.dataset.unreadableText)"
        )
        errors += [f"text of a figure that cannot be read: {item}" for item in unreadable]
        page.screenshot(path=str(screenshot), full_page=True)
        browser.close()
    return dialogs, errors


def test_report_in_a_real_browser(tiny_run):
    SCREENSHOT_DIR.mkdir(exist_ok=True)
    screenshot = SCREENSHOT_DIR / "report.png"
    dialogs, errors = open_in_browser(tiny_run / "results/report.html", screenshot)
    assert errors == [] and dialogs == []
    assert screenshot.stat().st_size > 50_000


def test_snakemake_report_builds_with_the_pages_section_numbers(tiny_run, tmp_path):
    """`snakemake --report` (written outside the shared run) files each artifact under the
    section number and title the HTML page gives it (the stage registry's)."""
    snakemake(tiny_run, "--report", str(tmp_path / "snakemake-report.html"))
    text = (tmp_path / "snakemake-report.html").read_text(errors="replace")
    assert "report.html" in text and "load.json" in text
    for name in ("offline", "allocator", "kv_validation", "serve", "client_fidelity", "capacity", "utilisation"):
        category = SECTION[name].category  # as it is, or escaped in the report's data ("1\u20132. ...")
        assert category in text or json.dumps(category)[1:-1] in text, category


def test_figure_text_cut_off_is_detected():
    """The clipping check can fail: a label far longer than its figure is reported."""
    import pandas as pd

    def draw(ax):
        ax.plot([0, 1], [0, 1])
        ax.set_ylabel("a label much too long to fit the height of this small figure " * 3)

    unreadable = figure("too long", draw, pd.DataFrame(), size=(3, 2)).unreadable_text
    assert unreadable and unreadable[0].startswith("a label much too long")
    assert figure("fits", lambda ax: ax.plot([0, 1], [0, 1]), pd.DataFrame()).unreadable_text == []


def test_level_names_that_run_into_each_other_are_fitted_and_any_left_are_reported():
    """Section 5's level names along x (nine levels, as the tiny run's) ran into each other at
    the figure's width: they are made smaller and wrapped, sixteen are turned upright, and then
    read as readable; crowded labels elsewhere (a numeric axis, a twin's right side) are
    reported and leave the category labels as they are."""
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    from infbench.report.figures import colliding_ticks, fit_category_labels

    names = ["c=1", "c=4", "chat c=1", "2.0 req/s", "1.0→4.0 req/s", "trace ×1 (0.50 req/s)", "4 users",
             "sessions 2→8/s", "chat 2.0 req/s, ≤4"]  # fmt: skip
    many = [f"c={2**i}" for i in range(8)] + names

    def fitted(labels: list[str], crowd_twin: bool = False) -> tuple[list[str], list[str], set[float]]:
        """What the check reads before and after fitting, and the x labels' turns."""
        fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=110)
        sns.barplot(x=labels, y=range(len(labels)), ax=ax)
        if crowd_twin:
            twin = ax.twinx()
            twin.set_yticks(range(40), [f"tick {i}" for i in range(40)])
        fig.tight_layout()
        before = colliding_ticks(fig)
        fit_category_labels(fig, ax)
        fig.tight_layout()
        after = colliding_ticks(fig)
        turns = {label.get_rotation() for label in ax.get_xticklabels()}
        plt.close(fig)
        return before, after, turns

    before, after, turns = fitted(names)
    assert "'2.0 req/s' runs into '1.0→4.0 req/s'" in before and after == [] and turns == {0.0}  # wrapped
    before, after, turns = fitted(many)
    assert before and after == [] and turns == {90.0}  # upright
    before, after, turns = fitted(["a", "b", "c"], crowd_twin=True)
    assert "'tick 0' runs into 'tick 1'" in before and after == before and turns == {0.0}
    levels = pd.DataFrame({"level": names, "ms": range(len(names))})
    assert figure("levels", lambda ax: sns.barplot(data=levels, x="level", y="ms", ax=ax), levels).unreadable_text == []

    def numeric(ax):
        ax.plot(range(10), range(10))
        ax.set_xticks(range(10), [f"a long tick label {i}" for i in range(10)])

    assert (
        figure("numeric", numeric, levels).unreadable_text[0] == "'a long tick label 0' runs into 'a long tick label 1'"
    )


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


def test_every_figure_of_the_report_can_be_read(tiny_run):
    context = build_context({"tiny": load_model_artifacts(model_artifact_paths(tiny_run))}, {}, [])
    figures = [f for m in context["models"] for part in m["sections"] for f in part["view"].get("figures", [])]
    figures.append(context["overview_figure"])
    assert len(figures) >= 8
    assert {f.title: f.unreadable_text for f in figures if f.unreadable_text} == {}


class VisibleText(HTMLParser):
    """A page's text as a reader sees it: block elements apart, inline ones run on."""

    BLOCKS = {"p", "div", "h1", "h2", "h3", "td", "th", "tr", "table", "li", "figure", "figcaption", "summary", "nav"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []

    def handle_starttag(self, tag, attrs):
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        self.parts.append("\n" if tag in self.BLOCKS else "")

    def handle_data(self, data):
        self.parts.append(data)


def run_together(html: str) -> list[str]:
    """Sentences the page runs together ("tokens.The"), where two template pieces join."""
    parser = VisibleText()
    parser.feed(html.split("<body>")[-1])
    text = "".join(parser.parts)
    return [text[m.start() - 30 : m.end() + 10] for m in re.finditer(r"[a-z0-9)\]]\.[A-Z]", text)]


def small_model() -> dict:
    """A model's facts as the header reads them."""
    return {
        "architecture": "LlamaForCausalLM",
        "parameters": 1000,
        "num_layers": 2,
        "num_kv_heads": 1,
        "head_dim": 8,
        "source": {"kind": "local", "path": "/models/small"},
        "kv_bytes_per_token": {"bfloat16": 64},
    }


def small_utilisation() -> dict:
    row = {"stage": "vllm_offline", "case": "single", "mbu": 0.25, "bytes_per_s": 2e9}
    row |= {"running": 1.0, "running_from": "gauge", "kv_tokens": 10.0, "weights_share": 0.9}
    return {
        "rows": [row],
        "bandwidth_bytes_per_s": 8e9,
        "bandwidth_method": "a copy",
        "formula": "bytes / step",
        "weight_bytes": 1e9,
        "dtype": "bfloat16",
    }


def small_paging_live() -> dict:
    def server(name, block_size, blocks, running):
        return {
            "name": name,
            "block_size": block_size,
            "kv": {"num_blocks": blocks, "max_concurrency_at_max_model_len": 19.0},
            "simulator": {
                "usable_blocks": blocks - 1,
                "lent_slots": (blocks - 1) * block_size,
                "users_at_peak_footprint": running,
                "replay_peak_running": running,
                "replay_preemptions": 0,
            },
            "vllm": {
                "peak_num_requests_running": float(running),
                "peak_num_requests_waiting": 3.0,
                "preemptions": 0.0,
            },
            "checks": [{"name": "pool", "status": "pass", "detail": "as configured"}],
        }

    return {
        "settings": {"max_model_len": 512, "output_tokens": 8, "pool_tokens": 10000, "requests": 100},
        "study": {"contiguous_users": 19, "paged_users": 92, "ratio": 92 / 19},
        "servers": [server("contiguous", 512, 19, 18), server("paged_32", 32, 289, 73)],
        "live_ratio": 73 / 18,
    }


def test_a_section_shown_carries_the_registry_number_and_title():
    """Sections with a view model are shown in the registry's order under its number and title
    (the live paging stage's with the study's ratio as measured); those without are left out."""
    artifacts = {"model": small_model(), "utilisation": small_utilisation(), "paging_live": small_paging_live()}
    html = render_page(build_context({"small": artifacts}, {}, []))
    utilisation = SECTION["utilisation"]
    assert f"<h3>{utilisation.number}. {utilisation.title}</h3>" in html
    assert "<h3>7. The study&#39;s 4.8× on vLLM itself</h3>" in html
    assert re.findall(r"<h3>([\d.–]+)\. ", html) == ["7", "8"]
    text = " ".join(html.replace("&#39;", "'").split())
    assert "This machine's memory bandwidth: <strong>8.0 GB/s</strong>" in text
    assert "<strong>18</strong> and <strong>73</strong> requests at once: <strong>4.06&times;</strong>" in text
    assert not run_together(html)


def test_the_registry_and_the_partials_agree():
    """Every section has its partial, every partial a section, and every template the page
    includes is one rule html_report declares (an edit reruns the report)."""
    partials = {path.name.removesuffix(".html.j2") for path in (TEMPLATES / "sections").glob("*.html.j2")}
    assert partials == {section.name for section in SECTIONS}
    env = environment(TEMPLATES)
    seen, pending = set(), ["report.html.j2"]
    while pending:
        name = pending.pop()
        source = env.loader.get_source(env, name)[0]
        if name.endswith(".j2"):
            referenced = set(jinja2.meta.find_referenced_templates(env.parse(source)))
            if None in referenced:  # the sections, included by name from the registry
                referenced = (referenced - {None}) | {f"sections/{s.name}.html.j2" for s in SECTIONS}
            pending += sorted(referenced - seen)
            seen |= referenced
    assert seen >= {"style.css", "macros.html.j2", "parts/checks.html.j2"}
    assert all(any(fnmatch.fnmatch(name, pattern) for pattern in DECLARED_PARTIALS) for name in seen), seen
    rule = (REPO / "workflow" / "rules" / "report.smk").read_text()
    assert all(f'"report/{pattern}"' in rule for pattern in DECLARED_PARTIALS[:3])


def test_each_section_names_a_view_and_artifacts_a_stage_writes():
    """The registry is the only list of sections: each names a view function that exists and
    reads only artifacts some stage writes, beside a section listed before it."""
    import importlib

    from infbench.stages import STAGES

    written = {artifact for stage in STAGES for artifact in stage.outputs}
    for index, section in enumerate(SECTIONS):
        module, function = section.view.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), function)), section.name
        assert set(section.reads) <= written and section.reads, section.name
        assert section.beside is None or section.beside in {s.name for s in SECTIONS[:index]}, section.name


def attribute_chains(source: str) -> list[str]:
    """Every name followed by attribute or item lookups inside the template's tags, with string
    literals left out: `v.request.prompt`, `b[k].users`."""
    chains = []
    for tag in re.findall(r"\{\{.*?\}\}|\{%.*?%\}", source, flags=re.S):
        tag = re.sub(r"'[^']*'|\"[^\"]*\"", '""', tag)
        chains += [m.group(0) for m in re.finditer(r"(?<![\w.\]])[A-Za-z_]\w*(?:\s*(?:\.\s*\w+|\[[^\]]*\]))+", tag)]
    return chains


def test_no_template_reaches_deeper_than_two_levels():
    """Templates read view models, not raw artifacts: at most `v.part.value`."""
    assert attribute_chains('{{ v.a.b.c }} {{ x["k"].y }} {{ "a.b.c.d" }} {{ v.a.b }}') == [
        "v.a.b.c",
        'x[""].y',
        "v.a.b",
    ]
    deep = {}
    for path in sorted(TEMPLATES.rglob("*.j2")):
        for chain in attribute_chains(path.read_text()):
            if len(re.findall(r"\.\s*\w+|\[[^\]]*\]", chain)) > 2:
                deep.setdefault(path.relative_to(TEMPLATES).as_posix(), []).append(chain)
    assert deep == {}


def test_every_sentence_of_a_partial_is_spaced_from_the_next():
    """Branches the tiny run does not take (an external endpoint, no rate search, no cost) still
    leave a space between two sentences."""
    env = environment(TEMPLATES)
    capacity = {
        "target": 90,
        "rule": "A load is served by a rule.",
        "slo": [("TTFT", 1000)],
        "predicted": {"value": 8, "usable_blocks": 10, "block_size": 16},
        "endpoint": "http://example.test/v1",
        "start": {"first_probe": 1, "why": "c=1 already takes 67 % of the TPOT SLO: starting at 1"},
        "measured_kv_limit": None,
        "binding_limit": "compute",
        "binding_at": 4,
        "binding_evidence": "nothing waited",
        "max_num_seqs": None,
        "cost": None,
        "rate_searched": False,
        "behind_share": "90%",
        "window": {"seconds": 10, "requests": 40, "repeats": 3, "max_search_s": 300},
        "rate_window_s": None,
        "settled_early": "in this run: c=1",
        "out_of_time": "in this run: the concurrency search after 301 s",
        "estimate_method": "a fit",
        "runs": [],
        "failed_runs": [],
        "rerun_method": None,
        "summary": pd.DataFrame(),
        "figures": [],
        "probes": pd.DataFrame(),
        "users_by_turn": pd.DataFrame([{"turn": 1, "turns counted": 9}, {"turn": 2, "turns counted": 8}]),
        "requests_table": {"file": "capacity.requests.csv", "rows": 10},
        "users": {
            "capacity": "12 users",
            "think": "2 s (exponential)",
            "reply": "the recorded replies",
            "source": "10 conversations (30 turns, 2 with a system prompt) from chats.json",
            "predicted": 14,
            "predicted_from": None,
            "at": {
                "users": 12,
                "in_flight": "3.0",
                "response_s": "0.50",
                "think_s": "2.00",
                "implied": "12.0",
                "hit_rate": "40%",
                "mean_turn": "2.5",
                "mean_prompt_tokens": "300",
            },
            "prefix_caching": "on",
            "kv": {"in_flight": 20, "blocks": "3.5", "users": "90"},
            "session_rate": "at least 1.50 sessions/s, not tested above",
        },
    }
    serve = {
        "endpoint": {"base_url": "http://example.test/v1", "model": "m", "metrics": False},
        "startup_s": None,
        "kv_blocks": None,
        "kv_block_size": None,
        "prefix_caching": True,
        "request": {
            "prompt": "Hi",
            "cold_s": "0.10",
            "prompt_tokens": 2,
            "completion_tokens": 5,
            "text": "Hello.",
            "warm_median_s": None,
            "warm_n": None,
            "warm_s": "0.05",
        },
        "study": {"latency_s": 1.29, "prompt_tokens": 7, "completion_tokens": 50, "method": "m", "hardware": "h"},
        "repeats": 1,
        "window": {"seconds": "5", "min_requests": 16},
        "whole_pass_levels": "ramp levels",
        "chat_levels": True,
        "notes": [],
        "placement": "apart",
        "engine_cpus": "none",
        "client_cpus": "0",
        "ceiling": {
            "per_request_us": "700",
            "per_chunk_us": "20.0",
            "chunk_ceiling": "50000",
            "first_byte_ms": "0.90",
        },  # fmt: skip
        "table": pd.DataFrame(),
        "figures": [],
        "breakdown": pd.DataFrame(),
        "requests_table": {"file": "load.requests.csv", "rows": 10},
        "users_levels": {
            "source": "10 conversations (30 turns, 2 with a system prompt) from chats.json",
            "reply": "the recorded replies",
            "think": "2 s (exponential)",
            "table": pd.DataFrame([{"level": "4 users"}]),
            "session_ramp": "sessions 0.5→4/s",
            "ramp_sessions": 16,
        },
    }
    reruns = {
        **capacity,
        "runs": [
            {
                "run": 1,
                "headline": False,
                "capacity": "c=2",
                "outcome": "bracketed",
                "fitted": "c=2 [95 % CI c=2 to c=3]",
            },
            {"run": 2, "headline": True, "capacity": "c=4", "outcome": "out of time", "fitted": "c=4 [c=4 to c=5]"},
        ],
        "failed_runs": [{"run": 3, "error": "the server exited"}],
        "rerun_method": "a prediction interval",
    }
    for name, view in (("capacity", capacity), ("capacity", reruns), ("serve", serve)):
        html = env.get_template(f"sections/{name}.html.j2").render(v=view)
        assert not run_together("<body>" + html), name
    assert run_together("<body><p>It ran.Then it stopped.</p>")


def test_the_speed_figure_joins_the_points_no_other_beats_on_both_speeds():
    """Serving levels and capacity probes as (output tok/s, 1000 / median TPOT): c=32 is slower
    on both than c=16, c=24 than c=8, and c=4 as fast in all as c=8 but slower per user; c=48
    missed its SLO yet is on the front, the fastest in all: c=1, c=8, c=16, c=48."""

    def level(c, throughput, tpot):
        across = {"output_throughput": {"mean": throughput}, "median_tpot_ms": {"mean": tpot}}
        return {"mode": "concurrency", "max_concurrency": c, "across_repeats": across}

    def probe(c, throughput, tpot, met):
        return {"load": c, "met": met, "output_throughput": {"mean": throughput}, "median_tpot_ms": tpot}

    artifacts = {
        "load": {"levels": [level(1, 20.0, 40.0), level(8, 100.0, 60.0), level(4, 100.0, 80.0)]},
        "capacity": {
            "concurrency": {
                "probes": [
                    probe(16, 150.0, 90.0, True),
                    probe(32, 140.0, 200.0, False),
                    probe(24, 90.0, 100.0, False),
                    probe(48, 200.0, 250.0, False),
                ]
            }
        },
    }
    points = speed_points("m", artifacts)
    assert [(p["load"], p["output tok/s per user"]) for p in points][:2] == [("c=1", 25.0), ("c=8", 1000 / 60)]
    assert [p["load"] for p in pareto_front(points)] == ["c=1", "c=8", "c=16", "c=48"]
    shown = speed_figure({"m": artifacts, "n": artifacts})
    assert len(shown.table) == 14 and shown.unreadable_text == []
    assert speed_figure({"m": {}}) is None


def test_the_answer_gives_capacity_binding_rerun_cost_speedup_and_failed_checks():
    probes = [{"load": 8, "decided": True}, {"load": 9, "decided": True}]
    estimate = {"value": 8, "ci95": [8, 8], "lowest_probe": 4, "highest_probe": 16}
    search = {"capacity": 8, "first_failing": 9, "outcome": "bracketed", "probes": probes, "estimate": estimate}
    artifacts = {
        "capacity": {
            "slo_ms": {"tpot": 100},
            "attainment_target": 0.9,
            "concurrency": {**search, "binding": {"limit": "kv_memory"}},
            "users": search,
            "session_rate": search,
            "cost": {"per_million_output_tokens": 1.5, "currency": "EUR"},
        },
        "offline_comparison": {
            "ratios": [
                {"vllm_scenario": "study_single_16", "hf_scenario": "study_single_16",
                 "output_throughput": {"ratio": 1.1, "ci95_low": 0.9, "ci95_high": 1.3}},
                {"vllm_scenario": "workload_continuous", "hf_scenario": "workload_sequential",
                 "output_throughput": {"ratio": 2.5, "ci95_low": 2.0, "ci95_high": 3.0}},
            ]
        },
    }  # fmt: skip
    checks = [
        {"model": "m", "stage": "capacity", "name": "attainment falls", "status": "fail"},
        {"model": "m", "stage": "load c=4", "name": "repeats agree", "status": "warn"},
        {"model": "other", "stage": "load", "name": "no failures", "status": "fail"},
    ]
    rows = dict(answer("m", artifacts, checks)["rows"])
    assert rows == {
        "requests in flight served, 90% of requests within TPOT ≤ 100 ms": "c=8 (fitted c=8 [95 % CI c=8 to c=8])",
        "requests in flight: a rerun": "not measured: one run (capacity.runs: 3 adds it)",
        "users in chat sessions served, 90% of turns within TPOT ≤ 100 ms": (
            "8 users (fitted 8 users [95 % CI 8 users to 8 users])"
        ),
        "users in chat sessions: a rerun": "not measured: one run (capacity.runs: 3 adds it)",
        "new chat sessions a second served, 90% of turns within TPOT ≤ 100 ms": (
            "8 sessions/s (fitted 8 sessions/s [95 % CI 8 sessions/s to 8 sessions/s])"
        ),
        "new chat sessions a second: a rerun": "not measured: one run (capacity.runs: 3 adds it)",
        "what binds it": "KV memory (requests waited for blocks or were preempted)",
        "cost per million output tokens": "1.50 EUR",
        "vLLM over HF, output tok/s (workload_continuous vs workload_sequential)": "2.50× [2.00, 3.00]",
        "validity checks that failed": "capacity: attainment falls",
    }
    assert dict(answer("n", {}, checks)["rows"]) == {"validity checks that failed": "none"}
    html = environment(TEMPLATES).get_template("parts/answer.html.j2").render(answers=[answer("m", artifacts, checks)])
    assert "<th>m</th>" in html and "KV memory" in html and not run_together("<body>" + html)


def test_the_offline_section_says_when_only_the_studys_request_ran():
    """The default (benchmark.workload_scenarios off) names the batching comparison it left out
    and where to turn it on; a run with the workload's scenarios does not; both spaced."""
    env = environment(TEMPLATES)
    offline = {
        "dtype": "float32",
        "threads": 2,
        "pinned_cpus": "0, 1",
        "warmup_runs": 1,
        "warmup_max_tokens": 16,
        "repeats": 3,
        "prefix_caching": "off",
        "workload_scenarios": False,
        "engine_reports": [{"engine": "HF", "device": "cpu", "dtype": "float32"}],
        "timing": None,
        "figures": [],
        "ratios": None,
        "rounds": None,
        "study": {"hardware": "h", "method": "m", "figures": [], "vllm_over_hf": "1.23", "kv_cache_tokens": "1"},
        "agreement": None,
        "table": pd.DataFrame(),
        "engine": None,
    }
    template = env.get_template("sections/offline.html.j2")
    default = template.render(v=offline)
    full = template.render(v={**offline, "workload_scenarios": True})
    for html in (default, full):
        assert not run_together("<body>" + html)
    said = "the batching comparison (the workload one at a time, in static batches, all at once) is off"
    assert said in " ".join(default.split()) and "config/full.yaml" in default
    assert said not in " ".join(full.split()) and "config/full.yaml" not in full


def test_the_checks_are_read_from_each_artifact_worst_first():
    """Every artifact's stored checks under its model and stage (a load level's and a live
    paging server's by name), worst first; a dirty working tree in any provenance is one
    warning; an artifact from before its stage stored checks says so (not available) instead of
    letting "all passed" hide what its stage would have checked."""
    from infbench.report.checks import collect_checks

    def item(name, status):
        return {"name": name, "status": status, "value": None, "detail": f"{name} {status}"}

    clean = {"git": {"commit": "abc", "dirty": False}}
    artifacts = {
        "model": small_model(),
        "capacity": {"checks": [item("converged", "warn")], "provenance": clean},
        "allocator": {"checks": [item("pool", "pass")], "provenance": {"git": {"commit": "abc", "dirty": True}}},
        "offline_comparison": {"checks": [item("same weights", "fail")]},
        "load": {
            "levels": [
                {
                    "mode": "concurrency",
                    "max_concurrency": 4,
                    "api": "completions",
                    "checks": [item("send_lag", "not_available")],
                }
            ]
        },  # fmt: skip
        "paging_live": small_paging_live(),
        "kv_validation": {"status": "pass", "detail": "an artifact from before its check was stored"},
        "workload": [{"id": "r0"}],
    }
    checks = collect_checks("m", artifacts)
    assert [(c["stage"], c["name"], c["status"]) for c in checks] == [
        ("offline comparison", "same weights", "fail"),
        ("capacity", "converged", "warn"),
        ("provenance", "code version recorded", "warn"),
        ("load c=4", "send_lag", "not_available"),
        ("kv validation", "checks stored with the artifact", "not_available"),
        ("allocator", "pool", "pass"),
        ("paging live", "contiguous: pool", "pass"),
        ("paging live", "paged_32: pool", "pass"),
    ]
    assert {c["model"] for c in checks} == {"m"} and checks[2]["detail"].endswith("working tree: allocator")
