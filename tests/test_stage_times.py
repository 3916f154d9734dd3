"""Stage times: Snakemake's run-time records read back and written as docs/stage-times.md."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infbench.core.stage_times import StageTimesError, collect, render, rule_and_model, write_stage_times

REPO = Path(__file__).resolve().parents[1]
HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def plant(root: Path, relative: str, *rows: tuple[float, str], mtime: float = 1_700_000_000) -> Path:
    """A record as Snakemake writes it: the header, then one row per repeat (seconds, max_rss)."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(
        f"{s:.4f}\t0:00:{int(s) % 60:02d}\t{rss}\t9.0\t1.0\t1.0\t0.1\t0.0\t50.0\t{s / 2:.2f}\n" for s, rss in rows
    )
    path.write_text(HEADER + body)
    os.utime(path, (mtime, mtime))
    return path


def test_median_over_repeats_and_rule_model_from_the_path(tmp_path):
    root = tmp_path / "benchmarks"
    plant(
        root, "tiny/serve.tsv", (30.0, "100.0"), (10.0, "300.0"), (11.0, "200.0")
    )  # median 11: not the mean, first or last
    plant(root, "tiny/hf_baseline.tsv", (7.5, "581.2"))
    plant(root, "other-model/vllm_offline_round2.tsv", (11.0, "NA"), (13.0, "NA"))  # even rows: mean of the middle
    plant(root, "machine.tsv", (2.0, "50.0"))
    times = {(t.rule, t.model, t.round): t for t in collect(root)}
    assert set(times) == {
        ("serve", "tiny", None),
        ("hf_baseline", "tiny", None),
        ("vllm_offline_round", "other-model", 2),
        ("machine", None, None),
    }
    serve = times["serve", "tiny", None]
    assert (serve.seconds, serve.rows, serve.max_rss_mib) == (11.0, 3, 200.0)
    offline_round = times["vllm_offline_round", "other-model", 2]
    assert (offline_round.seconds, offline_round.max_rss_mib) == (12.0, None)
    assert times["machine", None, None].seconds == 2.0


def test_records_in_pipeline_order_per_model(tmp_path):
    root = tmp_path / "benchmarks"
    for rule in ("paging_live", "serve", "vllm_offline", "hf_baseline", "zz_unknown", "hf_baseline_round2"):
        plant(root, f"m/{rule}.tsv", (1.0, "1.0"))
    assert [t.label for t in collect(root)] == [
        "hf_baseline",
        "hf_baseline_round (round 2)",
        "vllm_offline",
        "serve",
        "paging_live",
        "zz_unknown",
    ]


def test_page_names_machine_date_command_and_every_record(tmp_path):
    root = tmp_path / "benchmarks"
    plant(root, "tiny/serve.tsv", (95.0, "1000.0"), (125.0, "1000.0"), (100.0, "1000.0"), mtime=1_700_000_000)
    plant(root, "tiny/hf_baseline.tsv", (7.0, "581.0"), mtime=1_700_200_000)
    output = tmp_path / "docs" / "stage-times.md"
    write_stage_times(root, output, command="python scripts/stage_times.py --x", machine=None, note="tiny config")
    text = output.read_text()
    assert "`python scripts/stage_times.py --x`" in text and "tiny config" in text
    assert "- Measured: 2023-11-14 to 2023-11-17" in text
    assert "logical cores" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `hf_baseline` | tiny | 7.0 | 1 | 581 |",
        "| `serve` | tiny | 100.0 (1 min 40 s) | 3 | 1000 |",
    ]
    assert "Sum of the rules above: 107.0 (1 min 47 s)" in text


def test_render_takes_the_machine_it_is_given():
    text = render([], machine="Test CPU 9000, 7 logical cores", command="c", source="b")
    assert "- Machine: Test CPU 9000, 7 logical cores" in text and "No run-time records found" in text


def test_bad_records_are_refused_with_their_path(tmp_path):
    root = tmp_path / "benchmarks"
    (root / "m").mkdir(parents=True)
    (root / "m" / "serve.tsv").write_text("seconds\tx\n1\t2\n")
    with pytest.raises(StageTimesError, match="serve.tsv.*header must start with `s`"):
        collect(root)
    (root / "m" / "serve.tsv").write_text(HEADER)
    with pytest.raises(StageTimesError, match="no row with a number of seconds"):
        collect(root)
    with pytest.raises(StageTimesError, match="no such folder"):
        collect(tmp_path / "missing")
    with pytest.raises(StageTimesError, match="expected benchmarks"):
        rule_and_model(root / "a" / "b" / "c.tsv", root)


def test_command_line_writes_the_page_and_exits_2_without_records(tmp_path):
    root = tmp_path / "benchmarks"
    plant(root, "tiny/serve.tsv", (3.0, "1.0"))
    output = tmp_path / "stage-times.md"
    script = str(REPO / "scripts" / "stage_times.py")
    result = subprocess.run(
        [sys.executable, script, "--benchmarks", str(root), "--output", str(output), "--machine", "CPU X"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "1 records" in result.stdout
    text = output.read_text()
    assert f"--benchmarks {root}" in text and "- Machine: CPU X" in text and "| `serve` | tiny | 3.0 |" in text
    missing = subprocess.run(
        [sys.executable, script, "--benchmarks", str(tmp_path / "none"), "--output", str(tmp_path / "none.md")],
        capture_output=True,
    )
    assert missing.returncode == 2 and b"no such folder" in missing.stderr
