"""Benchmark: do the offline stages' warm-ups (run_scenarios: a scenario's first group cut to
infbench.workload.requests.WARMUP_MAX_TOKENS output tokens where an earlier scenario ran a
group of its size with prompts and outputs at least as long, whole otherwise) warm an engine
as well as whole warm-ups of every scenario? Each trial is a fresh process (a new
engine, as a stage is), the two alternating, who goes first alternating by round, through the
offline stages' own scenarios on the given workload. Printed per scenario and warm-up, the
median over trials of

    first-repeat excess   duration of repeat 1 / median duration of the repeats after it - 1

which a warm-up that left work for the timed repeats raises, and the cut arm's excess less
the whole arm's, paired by round, with its 95 % Student-t interval; then how much shorter the
untimed time (the warm-ups) is with cut warm-ups (median over trials). The scenarios are
config/full.yaml's (the study's 100 and 50 tokens, longest first, then the workload's: one at
a time, static batches of 4 and, for vLLM, all at once).

    python scripts/bench_warmup.py --engine hf --model resources/models/smollm2-135m-instruct \\
        --workload results/smollm2-135m-instruct/workload.jsonl --dtype bfloat16 --trials 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infbench.core.artifacts import read_jsonl
from infbench.core.stats import summarize

WHOLE = 10**9  # a cut no request reaches: the whole first group


def trial(args) -> dict:
    """One fresh engine through the offline stages' scenarios (run_scenarios, one warm-up
    each), the warm-ups of covered groups cut to `args.cut` output tokens."""
    from infbench.engines.settings import pin_process, vllm_engine_args
    from infbench.offline import scenarios

    pin_process(args.threads, "cpu")
    scenarios.WARMUP_MAX_TOKENS = args.cut
    if args.engine == "hf":
        from infbench.offline.hf_baseline import HFRunner

        runner = HFRunner(args.model, args.dtype, args.threads, "cpu")
    else:
        from infbench.offline.vllm_offline import VLLMRunner

        engine = {"kv_cache_gib": 1.0, "max_model_len": 512, "block_size": 128, "enable_prefix_caching": False}
        runner = VLLMRunner(vllm_engine_args(args.model, args.dtype, engine, 0, "cpu"))
    built = scenarios.build_scenarios(
        read_jsonl(args.workload), [50, 100], [4], continuous=args.engine == "vllm", workload_scenarios=True
    )
    started = time.perf_counter()
    records, _ = scenarios.run_scenarios(runner, built, 1, args.repeats, 1)
    durations = {r["name"]: [repeat["duration"] for repeat in r["repeats"]] for r in records}
    untimed_s = time.perf_counter() - started - sum(sum(d) for d in durations.values())
    return {"durations": durations, "untimed_s": untimed_s}


def first_repeat_excess(durations: list[float]) -> float:
    """Repeat 1's duration over the median of the repeats after it, less one."""
    return durations[0] / statistics.median(durations[1:]) - 1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["hf", "vllm"], required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats a scenario, at least 2")
    parser.add_argument("--trials", type=int, default=5, help="trials of each warm-up, at least 2")
    parser.add_argument("--cut", type=int, help=argparse.SUPPRESS)  # a trial's own process
    parser.add_argument("--out", help=argparse.SUPPRESS)  # where it writes its figures
    args = parser.parse_args()
    if args.repeats < 2 or args.trials < 2:
        parser.error("--repeats and --trials must be at least 2: the excess needs later repeats, the interval trials")
    if (args.cut is None) != (args.out is None):
        parser.error("--cut and --out are a trial's own arguments: give both or neither")
    if args.cut is not None:
        Path(args.out).write_text(json.dumps(trial(args)))
        return
    from infbench.workload.requests import WARMUP_MAX_TOKENS

    kinds = {"cut": WARMUP_MAX_TOKENS, "whole": WHOLE}
    runs = {kind: [] for kind in kinds}
    for round_ in range(args.trials):
        for kind in list(kinds) if round_ % 2 == 0 else list(kinds)[::-1]:
            with tempfile.TemporaryDirectory() as folder:
                out = Path(folder) / "trial.json"
                command = [sys.executable, __file__, *sys.argv[1:], "--cut", str(kinds[kind]), "--out", str(out)]
                trial_run = subprocess.run(command, capture_output=True, text=True)
                if trial_run.returncode:
                    sys.exit(f"a {kind} trial failed:\n{trial_run.stderr[-4000:]}")
                runs[kind].append(json.loads(out.read_text()))
            print(f"round {round_ + 1}: {kind} warm-up done", file=sys.stderr)
    print(f"{args.engine}, {args.trials} trials of each warm-up, {args.repeats} timed repeats a scenario")
    for name in runs["cut"][0]["durations"]:
        excess = {kind: [first_repeat_excess(r["durations"][name]) for r in runs[kind]] for kind in kinds}
        medians = ", ".join(f"{kind} {statistics.median(values):+.1%}" for kind, values in excess.items())
        paired = summarize(c - w for c, w in zip(excess["cut"], excess["whole"]))
        print(
            f"  {name}: first-repeat excess, medians {medians}; cut - whole, paired by round: "
            f"{paired.mean:+.1%} (95 % CI {paired.ci95_low:+.1%} to {paired.ci95_high:+.1%})"
        )
    saving = [w["untimed_s"] - c["untimed_s"] for c, w in zip(runs["cut"], runs["whole"])]
    print(f"  untimed time (the warm-ups) {statistics.median(saving):.1f} s shorter with cut warm-ups (median)")


if __name__ == "__main__":
    main()
