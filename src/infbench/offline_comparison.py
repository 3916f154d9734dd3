"""vLLM vs HF on the same scenarios: throughput and latency ratios with 95 % CIs, the
same-model verdict, and the study's published figures beside ours."""

from __future__ import annotations

from infbench import study_figures
from infbench.same_model_check import same_model_verdict
from infbench.stats import ratio_of_means, summarize

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


def compare(hf: dict, vllm: dict, gaps: dict, agreement_threshold: float) -> dict:
    def by_name(artifact):
        return {s["name"]: s for s in artifact["scenarios"]}

    hf_scenarios, vllm_scenarios = by_name(hf), by_name(vllm)
    ratios = []
    for vllm_name, hf_name, meaning in scenario_pairs(vllm, hf):
        ratios.append(
            {
                "vllm_scenario": vllm_name,
                "hf_scenario": hf_name,
                "meaning": meaning,
                **compare_pair(vllm_scenarios[vllm_name], hf_scenarios[hf_name]),
            }
        )
    return {
        "model": vllm["model"],
        "settings": {"hf": hf["settings"], "vllm": vllm["settings"]},
        "ratios": ratios,
        "agreement": same_model_verdict(hf["greedy_outputs"], vllm["greedy_outputs"], gaps, agreement_threshold),
        "study": study_figures.OFFLINE,
    }
