"""vLLM vs HF on the same scenarios: throughput and latency ratios with 95 % CIs, the checks
that the two ran like for like, the same-model verdict, and the study's published figures."""

from __future__ import annotations

from infbench.core import study_figures
from infbench.core.checks import check, passes
from infbench.core.stats import paired_ratio, ratio_of_means, summarize
from infbench.offline.same_weights import same_model_verdict
from infbench.offline.timing import TIMING

ENGINE_NAMES = {"hf": "HF", "vllm": "vLLM"}
RATIO_SCOPE = (
    "each engine's repeats ran back to back in its own job, the two jobs minutes apart: the interval holds "
    "within-process noise only, and any drift between the jobs is in the ratio, not in its interval"
)
ROUNDS_SCOPE = (
    "one value per round, each round one HF job and one vLLM job in fresh processes, run one after the other: "
    "the paired interval holds the noise between processes and jobs, and drift both engines of a round share cancels"
)

# (vLLM scenario, HF scenario, what the pair answers)
FIXED_PAIRS = [
    ("workload_sequential", "workload_sequential", "engine speed alone: both serve one request at a time"),
    (
        "workload_continuous",
        "workload_sequential",
        "what each system does with the whole workload: continuous batching vs a naive one-at-a-time server",
    ),
]


def scenario_pairs(vllm: dict, hf: dict) -> list[tuple[str, str, str]]:
    hf_names = {s["name"] for s in hf["scenarios"]}
    pairs = [
        (s["name"], s["name"], "like for like: the same requests submitted the same way")
        for s in vllm["scenarios"]
        if s["name"] in hf_names and s["kind"] in ("single", "static_batch")
    ]
    pairs += [pair for pair in FIXED_PAIRS if pair[1] in hf_names]
    vllm_names = {s["name"] for s in vllm["scenarios"]}
    return [pair for pair in pairs if pair[0] in vllm_names]


def compare_pair(vllm_scenario: dict, hf_scenario: dict) -> dict:
    def per_repeat(scenario, key):
        return [repeat[key] for repeat in scenario["repeats"]]

    return {
        "output_throughput": ratio_of_means(
            per_repeat(vllm_scenario, "output_throughput"), per_repeat(hf_scenario, "output_throughput")
        ),
        "mean_e2el": ratio_of_means(per_repeat(vllm_scenario, "mean_e2el_ms"), per_repeat(hf_scenario, "mean_e2el_ms")),
        "mean_ttft": ratio_of_means(per_repeat(vllm_scenario, "mean_ttft_ms"), per_repeat(hf_scenario, "mean_ttft_ms")),
        "vllm_output_throughput": summarize(per_repeat(vllm_scenario, "output_throughput")).to_json(),
        "hf_output_throughput": summarize(per_repeat(hf_scenario, "output_throughput")).to_json(),
    }


def by_name(artifact: dict) -> dict:
    return {s["name"]: s for s in artifact["scenarios"]}


def like_for_like_checks(hf: dict, vllm: dict, device: str, dtype: str) -> list[dict]:
    """What each engine reports about its own run against the config and against the other:
    a vLLM/HF ratio means something only where these pass."""
    checks = []
    for artifact in (hf, vllm):
        engine, reported = ENGINE_NAMES[artifact["engine"]], artifact["engine_report"]
        checks.append(
            check(
                f"{engine} ran on the configured device",
                passes(reported["device"] == device),
                reported["device"],
                f"{engine} reports its model on {reported['device']}; hardware.device is {device}",
            )
        )
        checks.append(
            check(
                f"{engine} ran in the configured dtype",
                passes(reported["dtype"] == dtype),
                reported["dtype"],
                f"{engine} reports {reported['dtype']}; the run asked for {dtype}",
            )
        )
        short = [
            f"{scenario['name']}/{request['request_id']}: {request['output_tokens']} of {request['max_tokens']}"
            for scenario in artifact["scenarios"]
            for request in scenario["requests"]
            if request["output_tokens"] != request["max_tokens"]
        ]
        checks.append(
            check(
                f"{engine} output tokens counted = asked",
                passes(not short),
                len(short),
                f"{len(short)} requests got another number of tokens than they asked for"
                + (f" ({'; '.join(short[:3])})" if short else " (counted from the returned tokens)"),
            )
        )
    if device == "cpu":
        hf_cpus, vllm_cpus = hf["engine_report"]["cpus"], vllm["engine_report"]["cpus"]
        checks.append(
            check(
                "both engines on the same CPUs",
                passes(hf_cpus == vllm_cpus),
                vllm_cpus,
                f"HF threads may run on CPUs {hf_cpus}, vLLM's engine core threads on {vllm_cpus}",
            )
        )
    differing = [key for key in TIMING if hf["timing"].get(key) != vllm["timing"].get(key)]
    checks.append(
        check(
            "both engines timed on one clock from the same start to the same end",
            passes(not differing),
            differing,
            f"differs in {', '.join(differing)}"
            if differing
            else f"{hf['timing']['clock']}; start: {hf['timing']['start']}; TTFT/E2EL end: first/last token sampled",
        )
    )
    return checks


def interleaved_rounds(hf_rounds: list[dict], vllm_rounds: list[dict]) -> dict | None:
    """With more than one round, each pair's throughput ratio per round and their paired
    interval across rounds, beside round 1's within-process interval."""
    if len(hf_rounds) < 2:
        return None
    rows = []
    for vllm_name, hf_name, meaning in scenario_pairs(vllm_rounds[0], hf_rounds[0]):

        def round_means(rounds, name):
            return [summarize(r["output_throughput"] for r in by_name(a)[name]["repeats"]).mean for a in rounds]

        vllm_means, hf_means = round_means(vllm_rounds, vllm_name), round_means(hf_rounds, hf_name)
        first = compare_pair(by_name(vllm_rounds[0])[vllm_name], by_name(hf_rounds[0])[hf_name])
        rows.append(
            {
                "vllm_scenario": vllm_name,
                "hf_scenario": hf_name,
                "meaning": meaning,
                "round_ratios": [v / h for v, h in zip(vllm_means, hf_means)],
                "across_rounds": paired_ratio(vllm_means, hf_means),
                "round_1_within_process": first["output_throughput"],
            }
        )
    return {"rounds": len(hf_rounds), "interval_scope": ROUNDS_SCOPE, "ratios": rows}


def compare(
    hf_rounds: list[dict],
    vllm_rounds: list[dict],
    gaps: dict,
    *,
    agreement_threshold: float,
    device: str,
    dtype: str,
) -> dict:
    """Round 1 (hf_baseline.json, vllm_offline.json) gives the ratios; further interleaved
    rounds, where configured, give the across-process intervals."""
    hf, vllm = hf_rounds[0], vllm_rounds[0]
    hf_scenarios, vllm_scenarios = by_name(hf), by_name(vllm)
    checks = []
    for number, (hf_run, vllm_run) in enumerate(zip(hf_rounds, vllm_rounds), start=1):
        for item in like_for_like_checks(hf_run, vllm_run, device, dtype):
            checks.append({**item, "name": item["name"] + (f" (round {number})" if number > 1 else "")})
    ratios = []
    for vllm_name, hf_name, meaning in scenario_pairs(vllm, hf):
        ratios.append(
            {
                "vllm_scenario": vllm_name,
                "hf_scenario": hf_name,
                "meaning": meaning,
                **compare_pair(vllm_scenarios[vllm_name], hf_scenarios[hf_name]),
                "interval_scope": RATIO_SCOPE,
            }
        )
    agreement = same_model_verdict(hf["greedy_outputs"], vllm["greedy_outputs"], gaps, agreement_threshold)
    checks.append(
        check(
            "HF and vLLM run the same weights",
            passes(not agreement["flagged"]),
            agreement["consistency"],
            agreement["note"],
        )
    )
    return {
        "model": vllm["model"],
        "settings": {"hf": hf["settings"], "vllm": vllm["settings"]},
        "checks": checks,
        "ratios": ratios,
        "interleaved_rounds": interleaved_rounds(hf_rounds, vllm_rounds),
        "agreement": agreement,
        "study": study_figures.OFFLINE,
    }
