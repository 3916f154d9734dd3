"""Two or more runs compared figure by figure: candidate / baseline with a 95 % interval from each
run's repeats, and a verdict that knows the noise and a threshold; what differs between the runs,
read from their provenance; and a gate that fails when a chosen figure regresses."""

from __future__ import annotations

import fnmatch
import json
import math
from dataclasses import asdict, dataclass, replace

from infbench.core.capacity_terms import ABOVE, BELOW, COUNTED, as_number, undecided_ends
from infbench.core.errors import UserError
from infbench.core.level_names import level_case, level_name
from infbench.core.stats import log_ratio, ratio_of_means, shift_for_power, summarize, t_upper
from infbench.core.stats import p_slower as stats_p_slower
from infbench.runs.results import RunResults

FASTER, SLOWER, NO_DIFFERENCE, NO_INTERVAL = "faster", "slower", "no difference detected", "no interval"
VERDICTS = (SLOWER, FASTER, NO_DIFFERENCE, NO_INTERVAL)

# metric -> (unit, which way is better). Offline: means over each repeat's requests, as the
# offline report shows them; serving: vLLM's medians, throughput and goodput per pass.
OFFLINE_METRICS = {
    "output_throughput": ("tok/s", "higher"),
    "mean_ttft_ms": ("ms", "lower"),
    "mean_tpot_ms": ("ms", "lower"),
    "mean_e2el_ms": ("ms", "lower"),
}
SERVING_METRICS = {
    "output_throughput": ("tok/s", "higher"),
    "request_goodput": ("req/s", "higher"),
    "median_ttft_ms": ("ms", "lower"),
    "median_tpot_ms": ("ms", "lower"),
    "median_itl_ms": ("ms", "lower"),
    "median_e2el_ms": ("ms", "lower"),
}
# artifact -> the stage its figures are keyed by
OFFLINE_ENGINES = {"hf_baseline": "offline_hf", "vllm_offline": "offline_vllm"}
STAGE_TITLES = {"offline_hf": "Offline: HF Transformers", "offline_vllm": "Offline: vLLM", "serve": "Serving"}
SAMPLES_OFFLINE = "the scenario's timed repeats, back to back in one process"
SAMPLES_SERVING = "the level's passes (load.repeats), one figure per pass"
SAMPLES_VLLM_BENCH = "one `vllm bench serve` run"


class GateError(UserError):
    """A gate that names no figure of the comparison."""


@dataclass(frozen=True)
class Figure:
    """One measured figure of one run, with every sample it was measured from."""

    key: str  # model/stage/case/metric: what the gate and the tables name
    model: str
    stage: str
    case: str
    metric: str
    unit: str
    better: str  # "higher" or "lower"
    samples: tuple[float, ...]
    samples_are: str
    dropped: int = 0  # samples that were missing or not finite (a pass where every request failed)


def figure_key(model: str, stage: str, case: str, metric: str) -> str:
    return "/".join((model, stage, case.replace(" ", "_"), metric))


def make_figure(model, stage, case, metric, unit_better, samples, samples_are) -> Figure | None:
    samples = list(samples)
    values = tuple(float(v) for v in samples if v is not None and math.isfinite(float(v)))
    if not values:
        return None
    unit, better = unit_better
    key = figure_key(model, stage, case, metric)
    return Figure(key, model, stage, case, metric, unit, better, values, samples_are, len(samples) - len(values))


def offline_figures(model: str, stage: str, artifact: dict) -> list[Figure]:
    figures = []
    for scenario in artifact["scenarios"]:
        for metric, unit_better in OFFLINE_METRICS.items():
            samples = [repeat.get(metric) for repeat in scenario["repeats"]]
            figures.append(
                make_figure(
                    model, OFFLINE_ENGINES[stage], scenario["name"], metric, unit_better, samples, SAMPLES_OFFLINE
                )
            )
    return figures


def serving_figures(model: str, load: dict) -> list[Figure]:
    figures = []
    for level in load["levels"]:
        case = level_name(level)
        for metric, unit_better in SERVING_METRICS.items():
            samples = [repeat.get(metric) for repeat in level["repeats"]]
            figures.append(make_figure(model, "serve", case, metric, unit_better, samples, SAMPLES_SERVING))
    return figures


def vllm_bench_figures(model: str, result: dict) -> list[Figure]:
    """The figures a vLLM result file has, under the level name this pipeline gives the same load
    (it has no goodput unless run with --goodput, and then under another name: left out)."""
    ramp = result.get("ramp_up_strategy")
    case = level_case(
        result.get("ramp_up_start_rps") if ramp else result.get("request_rate"),
        result.get("max_concurrency"),
        result.get("burstiness"),
        result.get("ramp_up_end_rps") if ramp else None,
        "chat" if result.get("backend") == "openai-chat" else "completions",
    )
    return [
        make_figure(model, "serve", case, metric, unit_better, [result.get(metric)], SAMPLES_VLLM_BENCH)
        for metric, unit_better in SERVING_METRICS.items()
        if metric != "request_goodput"
    ]


def run_figures(run: RunResults) -> dict[str, Figure]:
    """Every comparable figure of a run, by key."""
    figures = []
    for model, artifacts in run.models.items():
        for stage in OFFLINE_ENGINES:
            if stage in artifacts:
                figures += offline_figures(model, stage, artifacts[stage])
        if "load" in artifacts:
            figures += serving_figures(model, artifacts["load"])
        if "vllm_bench" in artifacts:
            figures += vllm_bench_figures(model, artifacts["vllm_bench"])
    return {figure.key: figure for figure in figures if figure is not None}


def summary_of(figure: Figure) -> dict:
    summary = summarize(figure.samples)
    return {
        "n": summary.n,
        "mean": summary.mean,
        "ci95_low": summary.ci95_low,
        "ci95_high": summary.ci95_high,
        "dropped": figure.dropped,
    }


def verdict(ratio: dict, better: str, threshold: float) -> str:
    """From candidate / baseline and its 95 % interval: the gain g = ratio where higher is better,
    1 / ratio where lower is better (g > 1: the candidate is faster). Then

    faster                  if the whole interval of g lies above 1 + threshold,
    slower                  if the whole interval of g lies below 1 / (1 + threshold),
    no difference detected  otherwise (the interval reaches into the threshold band),
    no interval             if either run has a single sample: its noise is unknown."""
    low, high = ratio["ci95_low"], ratio["ci95_high"]
    if not (math.isfinite(low) and math.isfinite(high)):
        return NO_INTERVAL
    gain_low, gain_high = (low, high) if better == "higher" else (1 / high, 1 / low)
    if gain_low > 1 + threshold:
        return FASTER
    if gain_high < 1 / (1 + threshold):
        return SLOWER
    return NO_DIFFERENCE


@dataclass
class FigureComparison:
    key: str
    model: str
    stage: str
    case: str
    metric: str
    unit: str
    better: str
    baseline: dict
    candidate: dict
    ratio: float  # candidate / baseline, of the means
    ci95_low: float
    ci95_high: float
    verdict: str
    samples_are: dict
    p_slower: float | None  # one-sided p-value of "no slower than the threshold band" (p_slower)
    se_log: float | None = None  # se(ln ratio), stats.log_ratio; None: no interval

    def to_json(self) -> dict:
        return asdict(self)


def compare_figure(baseline: Figure, candidate: Figure, threshold: float) -> FigureComparison:
    """candidate / baseline as a ratio of means over independent samples (stats.ratio_of_means)."""
    ratio = ratio_of_means(candidate.samples, baseline.samples)
    _, se_log, _ = log_ratio(candidate.samples, baseline.samples) or (None, None, None)
    return FigureComparison(
        key=baseline.key,
        model=baseline.model,
        stage=baseline.stage,
        case=baseline.case,
        metric=baseline.metric,
        unit=baseline.unit,
        better=baseline.better,
        baseline=summary_of(baseline),
        candidate=summary_of(candidate),
        ratio=ratio["ratio"],
        ci95_low=ratio["ci95_low"],
        ci95_high=ratio["ci95_high"],
        verdict=verdict(ratio, baseline.better, threshold),
        samples_are={"baseline": baseline.samples_are, "candidate": candidate.samples_are},
        p_slower=p_slower(baseline, candidate, threshold),
        se_log=se_log,
    )


def p_slower(baseline: Figure, candidate: Figure, threshold: float) -> float | None:
    """stats.p_slower of the candidate against the baseline, se(ln g) and Welch's df from
    stats.log_ratio; p < 0.025 exactly when the verdict is `slower`. None without an interval
    (a run with one sample)."""
    fitted = log_ratio(candidate.samples, baseline.samples)
    return None if fitted is None else stats_p_slower(*fitted, baseline.better, threshold)


CAPACITY_SEARCHES = {"concurrency": "requests in flight", "request_rate": "req/s", "users": "users",
                     "session_rate": "sessions/s"}  # fmt: skip
LOWER, HIGHER = "lower", "higher"
CAPACITY_METHOD = (
    "where both runs ran the search at least twice (capacity.runs), every run's capacity within its probed range, "
    "and the runs vary on one side at least, the ratio of their mean fitted capacities with a 95 % Welch interval "
    "over the runs (core/stats.ratio_of_means), which holds the spread between reruns (those of one side ran in "
    "one stretch of time, so drift over hours between the sides is not in it): lower when the interval lies "
    "wholly below 1, higher when above, else no difference detected. Otherwise each "
    "run's fitted SLO capacity with its 95 % bootstrap interval (capacity.json, estimate): lower when "
    "the candidate's whole interval lies below the baseline's, higher when above, no difference detected when "
    "they overlap (non-overlap of two 95 % intervals is a stricter test than 5 % of the sampling within each run; the "
    "intervals do not hold the spread between reruns, docs/method.md#capacity-reruns); an end outside the probed "
    "range as the bound it is (above the highest probe: at least it; below the lowest: at most it), so two runs "
    "at one ceiling show no difference; a bracket with an undecided end as the bound its decided end gives, "
    "not its fitted interval; no interval where a run measured no capacity"
)


def capacity_bounds(estimate: dict) -> tuple[float, float]:
    """An estimate's 95 % interval as numbers, an end off the probed range as the bound it gives:
    "above" at least the highest probe (no upper bound), "below" at most the lowest."""
    low, high = estimate["ci95"]
    return (
        estimate.get("highest_probe", BELOW) if low == "above" else as_number(low),
        estimate.get("lowest_probe", ABOVE) if high == "below" else as_number(high),
    )


def search_bounds(mode: str, search: dict) -> tuple[float, float] | None:
    """A search's capacity as numbers: where an end of its bracket is undecided, the bound the
    decided end gives (core/capacity_terms.undecided_bound: at least the met load, at most the
    one below the missed; neither decided: no bound), else its estimate's (capacity_bounds);
    None where it measured no capacity."""
    if search.get("outcome") != "client_limited" and "capacity" in search:
        passing, failing = search["capacity"], search["first_failing"]
        shaky = undecided_ends(search)
        if shaky == [False, True] and passing is not None:
            return passing, ABOVE
        if shaky == [True, False] and failing is not None:
            return BELOW, failing - 1 if mode in COUNTED else failing
        if any(shaky):
            return BELOW, ABOVE
    estimate = search.get("estimate")
    if not estimate or estimate["value"] is None or not estimate["ci95"]:
        return None
    return capacity_bounds(estimate)


def capacity_verdict(baseline: tuple[float, float] | None, candidate: tuple[float, float] | None) -> str:
    """CAPACITY_METHOD, from two searches' bounds (search_bounds)."""
    if baseline is None or candidate is None:
        return NO_INTERVAL
    base_low, base_high = baseline
    low, high = candidate
    if high < base_low:
        return LOWER
    if low > base_high:
        return HIGHER
    return NO_DIFFERENCE


def rerun_values(capacity: dict | None, mode: str) -> list[float] | None:
    """A run's fitted capacities over its capacity.runs, where there were two or more and each is
    a number (its rerun interval exists); else None."""
    interval = ((capacity or {}).get("rerun_interval") or {}).get(mode)
    return interval["values"] if interval and interval["ci95"] is not None else None


def by_runs(baseline: list[float] | None, candidate: list[float] | None) -> bool:
    """Whether two runs' capacities compare over their runs: both ran two or more within their
    probed ranges, and they vary on at least one side (with no spread at all, the runs' t
    interval would be a point: their own intervals judge instead)."""
    return bool(baseline and candidate) and (len(set(baseline)) > 1 or len(set(candidate)) > 1)


def runs_verdict(baseline: list[float], candidate: list[float]) -> tuple[str, dict]:
    """CAPACITY_METHOD's first rule: candidate over baseline, by ratio_of_means over the runs."""
    ratio = ratio_of_means(candidate, baseline)
    if ratio["ci95_high"] < 1:
        return LOWER, ratio
    if ratio["ci95_low"] > 1:
        return HIGHER, ratio
    return NO_DIFFERENCE, ratio


def unjudged(capacity: dict) -> str:
    """Why a capacity comparison has no interval: a run whose client was the limit, at the load
    above its capacity (a lower bound) or at its lowest (nothing measured), or a run that
    measured no capacity."""
    limited = [run for run in ("baseline", "candidate") if capacity[run].get("outcome") == "client_limited"]
    if limited:
        sides = " and ".join(limited)
        if any(capacity[run].get("value") is None for run in limited):
            return f"the {sides}'s client was the limit at its lowest load, so no capacity was measured to judge"
        return (
            f"the {sides}'s capacity is a lower bound, the client was the limit at the load above it, "
            "so it cannot be judged"
        )
    return "a run that measured no capacity cannot be judged"


def capacity_row(
    key: str,
    model: str,
    mode: str,
    base_search: dict,
    cand_search: dict,
    slo_ms: dict,
    base_runs: list[float] | None = None,
    cand_runs: list[float] | None = None,
    always: bool = False,
) -> dict | None:
    """One capacity search compared (CAPACITY_METHOD): over the runs where both sides ran it
    several times (by_runs), else by the searches' intervals; None where either has no estimate
    or the baseline's has no value, unless `always` (both searches ran: a row without an interval,
    so that a gate on it says why). `slo_ms`: each side's SLO, {"baseline": ..., "candidate": ...}."""
    base_estimate, cand_estimate = base_search.get("estimate"), cand_search.get("estimate")
    if not base_estimate or not cand_estimate or base_estimate["value"] is None:
        if not always:
            return None
        verdict, ratio = NO_INTERVAL, None
    elif by_runs(base_runs, cand_runs):
        verdict, ratio = runs_verdict(base_runs, cand_runs)
    else:
        verdict = capacity_verdict(search_bounds(mode, base_search), search_bounds(mode, cand_search))
        ratio = None
    return {
        "key": key,
        "model": model,
        "search": mode,
        "unit": CAPACITY_SEARCHES[mode],
        "slo_ms": slo_ms,
        **{
            side: {
                "value": (estimate or {}).get("value"),
                "ci95": (estimate or {}).get("ci95"),
                "outcome": search.get("outcome"),
            }
            for side, estimate, search in (
                ("baseline", base_estimate, base_search),
                ("candidate", cand_estimate, cand_search),
            )  # fmt: skip
        },
        # Over the runs (capacity.runs from 2 on both sides): the ratio and its interval.
        "runs": {"baseline": base_runs, "candidate": cand_runs, "ratio": ratio} if ratio else None,
        "verdict": verdict,
    }


def capacity_comparisons(baseline: RunResults, candidate: RunResults, models: dict[str, str]) -> list[dict]:
    """Each SLO capacity both runs searched (capacity_row)."""
    rows = []
    for candidate_model, base_model in models.items():
        base = baseline.models.get(base_model, {}).get("capacity")
        cand = candidate.models.get(candidate_model, {}).get("capacity")
        for mode in CAPACITY_SEARCHES:
            row = capacity_row(
                figure_key(base_model, "capacity", mode, "capacity"),
                base_model,
                mode,
                (base or {}).get(mode) or {},
                (cand or {}).get(mode) or {},
                {"baseline": (base or {}).get("slo_ms"), "candidate": (cand or {}).get("slo_ms")},
                rerun_values(base, mode),
                rerun_values(cand, mode),
            )
            if row:
                rows.append(row)
    return rows


def paired_models(baseline: RunResults, candidate: RunResults) -> dict[str, str]:
    """candidate model -> baseline model: by name, or the one model of each run when both hold
    exactly one (the same model named differently on two machines, or by vLLM's result file)."""
    if len(baseline.models) == 1 and len(candidate.models) == 1:
        return {next(iter(candidate.models)): next(iter(baseline.models))}
    return {name: name for name in candidate.models if name in baseline.models}


def compare_runs(baseline: RunResults, candidate: RunResults, threshold: float) -> dict:
    """Every figure both runs have, compared; and the figures only one of them has."""
    base = run_figures(baseline)
    renamed = {}
    models = paired_models(baseline, candidate)
    for figure in run_figures(candidate).values():
        if figure.model in models:
            model = models[figure.model]
            key = figure_key(model, figure.stage, figure.case, figure.metric)
            figure = replace(figure, key=key, model=model)
        renamed[figure.key] = figure
    both = [key for key in base if key in renamed]
    figures = [compare_figure(base[key], renamed[key], threshold) for key in both]
    counts = {name: sum(f.verdict == name for f in figures) for name in VERDICTS}
    return {
        "baseline": baseline.label,
        "candidate": candidate.label,
        "models": models,
        "counts": counts,
        "figures": [figure.to_json() for figure in figures],
        "capacities": capacity_comparisons(baseline, candidate, models),
        "only_in_baseline": sorted(set(base) - set(renamed)),
        "only_in_candidate": sorted(set(renamed) - set(base)),
    }


# The order in which provenance keys say what differs: what the user chose first.
DIFFERENCE_ORDER = ("tool", "config.", "versions.", "git.", "machine.", "threads", "date")


def difference_rank(key: str) -> tuple[int, str]:
    rank = next((i for i, prefix in enumerate(DIFFERENCE_ORDER) if key.startswith(prefix)), len(DIFFERENCE_ORDER))
    return rank, key


def shown(values: set[str] | None) -> str:
    """A provenance key's values in one run, as text: absent when the run has no such stage."""
    if not values:
        return "(absent)"
    return ", ".join(str(json.loads(value)) for value in sorted(values))


def provenance_differences(runs: list[RunResults]) -> list[dict]:
    """The provenance keys whose values are not the same in every run, config first: the keys
    every run has, then those only some runs have (a stage that did not run in one)."""
    keys = sorted({key for run in runs for key in run.provenance}, key=difference_rank)
    differing = [key for key in keys if len({frozenset(run.provenance.get(key, ())) for run in runs}) > 1]
    everywhere = [key for key in differing if all(key in run.provenance for run in runs)]
    somewhere = [key for key in differing if key not in everywhere]
    return [
        {"key": key, "in_every_run": key in everywhere, "values": [shown(run.provenance.get(key)) for run in runs]}
        for key in everywhere + somewhere
    ]


def short_key(key: str) -> str:
    return key.removeprefix("config.").removeprefix("versions.").removeprefix("machine.")


def auto_labels(runs: list[RunResults], differences: list[dict], most: int = 2) -> list[str]:
    """Each run named by what sets it apart: up to `most` differing keys every run has, as
    key=value; else the keys only some runs have, where there are at most `most` (a setting left
    at its default in one run; more are stages one run did not run); else, or where two labels
    would coincide, the source path."""
    usable = [d for d in differences if not d["key"].startswith("git.dirty")]
    everywhere = [d for d in usable if d["in_every_run"]]
    named = everywhere[:most] or (usable if len(usable) <= most else [])
    labels = [
        "; ".join(f"{short_key(d['key'])}={d['values'][index]}" for d in named) or run.source
        for index, run in enumerate(runs)
    ]
    if len(set(labels)) < len(labels):
        labels = [run.source for run in runs]
    if len(set(labels)) < len(labels):
        labels = [f"run {index + 1}: {run.source}" for index, run in enumerate(runs)]
    return labels


# The gate's error rate over its whole family of gated figures (Holm's step-down): one-sided
# 2.5 %, so that a gate on one figure fails exactly when its verdict is `slower`.
GATE_ALPHA = 0.025
GATE_METHOD = (
    "a gated figure fails when it is missing from the candidate, has no interval there, or is slower: "
    "Holm's step-down over every gated figure of the comparison at a family-wise 2.5 % (one-sided), "
    "on p_slower (H0: no slower than the threshold band); a gated SLO capacity fails when its verdict "
    "(the capacity rule) is lower, or it has no interval (a run that measured no capacity, or a client-limited one)"
)


def holm(p_values: list[float], alpha: float = GATE_ALPHA) -> list[bool]:
    """Holm's step-down: with the m p-values in ascending order, reject the k-th (k = 1..m) while
    p_(k) <= alpha / (m - k + 1); stop at the first that is not. The chance of rejecting any true
    null among the m is at most alpha, whatever their dependence."""
    rejected = [False] * len(p_values)
    for rank, index in enumerate(sorted(range(len(p_values)), key=p_values.__getitem__)):
        if p_values[index] > alpha / (len(p_values) - rank):
            break
        rejected[index] = True
    return rejected


def gated(key: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns)


def tested_figures(comparison: dict, patterns: list[str]) -> list[dict]:
    """The gated figures of one comparison that the gate tests: with an interval, none of the
    candidate's passes dropped. Holm's correction runs over these."""
    return [
        f for f in comparison["figures"]
        if gated(f["key"], patterns) and f["p_slower"] is not None and not f["candidate"].get("dropped", 0)
    ]  # fmt: skip


def no_interval_reason(figure: dict) -> str:
    """Why a figure has no p-value: a side with no value, a value not above zero, or one sample."""
    baseline = figure["baseline"]
    # Dropped passes remove the interval only where the rest cannot stand in (variants: any
    # dropped pass; a run: fewer than two values left).
    if baseline.get("dropped", 0) and (None in baseline.get("samples", []) or baseline["n"] < 2):
        return f"{baseline['dropped']} of the baseline's passes have no value (their requests failed)"
    values = [figure[side]["mean"] for side in ("baseline", "candidate")]
    values += [v for side in ("baseline", "candidate") for v in figure[side].get("samples", [])]
    if any(v is None or not v > 0 for v in values):
        return "a value is not above zero (e.g. no request met the SLO)"
    return "a run has one sample"


def capacity_side(side: dict) -> str:
    """One side's capacity in a gate line: its value and interval, or none measured."""
    if side["value"] is None:
        return "none"
    return f"{side['value']} {side['ci95']}" if side.get("ci95") else f"{side['value']} (no interval)"


def gate(record: dict, patterns: list[str]) -> list[str]:
    """One line per gated figure that fails (GATE_METHOD), empty when none does. A pattern
    (fnmatch, on the figure's key) that matches no figure of the baseline is an error: a gate
    that cannot fail is no gate."""

    baseline_keys = {f["key"] for c in record["comparisons"] for f in [*c["figures"], *c.get("capacities", [])]}
    baseline_keys |= {key for c in record["comparisons"] for key in c["only_in_baseline"]}
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(key, pattern) for key in baseline_keys):
            keys = sorted(baseline_keys)
            raise GateError(
                f"--gate {pattern!r} matches none of the {len(keys)} compared figures (e.g. "
                f"{', '.join(keys[:3]) or 'none'}); name one by its key, wildcards allowed, such as "
                "'*/serve/c=4/output_throughput'"
            )
    lines = []
    for comparison in record["comparisons"]:
        pair = f"{comparison['candidate']} / {comparison['baseline']}"
        for key in comparison["only_in_baseline"]:
            if gated(key, patterns):
                lines.append(
                    f"missing: {key} is in the baseline but not in {comparison['candidate']} (no finite value)"
                )
        figures = [figure for figure in comparison["figures"] if gated(figure["key"], patterns)]
        for figure in figures:
            dropped = figure["candidate"].get("dropped", 0)
            if dropped:
                lines.append(
                    f"incomplete: {figure['key']} ({pair}): {dropped} of the candidate's passes have no value "
                    "(their requests failed), so the rest cannot stand for it"
                )
            elif figure["p_slower"] is None:
                why = no_interval_reason(figure)
                lines.append(f"no interval: {figure['key']} ({pair}): {why}, so it cannot be judged")
        for capacity in comparison.get("capacities", []):
            if gated(capacity["key"], patterns) and capacity["verdict"] in (LOWER, NO_INTERVAL):
                runs = capacity.get("runs")
                if runs:
                    ratio = runs["ratio"]
                    lines.append(
                        f"regressed: {capacity['key']} ({pair}): over capacity.runs {runs['candidate']} against "
                        f"{runs['baseline']} {capacity['unit']}, mean ratio {ratio['ratio']:.2f} "
                        f"[{ratio['ci95_low']:.2f}, {ratio['ci95_high']:.2f}] (its 95 % interval lies wholly below 1)"
                    )
                    continue
                why = (
                    "regressed: its 95 % interval lies wholly below the baseline's"
                    if capacity["verdict"] == LOWER
                    else f"no interval: {unjudged(capacity)}"
                )
                candidate, baseline = (capacity_side(capacity[side]) for side in ("candidate", "baseline"))
                lines.append(
                    f"{why.split(':')[0]}: {capacity['key']} ({pair}): {candidate} against {baseline} "
                    f"{capacity['unit']} ({why.split(': ')[1]})"
                )
        tested = tested_figures(comparison, patterns)
        for figure, regressed in zip(tested, holm([figure["p_slower"] for figure in tested])):
            if regressed:
                lines.append(
                    f"regressed: {figure['key']} {(figure['ratio'] - 1) * 100:+.1f} % "
                    f"({figure['better']} is better; {pair} = {figure['ratio']:.3f}, 95 % interval "
                    f"[{figure['ci95_low']:.3f}, {figure['ci95_high']:.3f}]; p_slower {figure['p_slower']:.2g}, "
                    f"Holm over {len(tested)} gated figure(s) at {GATE_ALPHA:.1%}, threshold {record['threshold']:.0%})"
                )
    return lines


GATE_POWER = 0.8  # the conventional power: a slowdown the gate catches in 4 comparisons of 5
REACH_CAP = 100.0  # a reach past a factor of 100 is stated as "beyond x100" (null in the JSON), not computed


def catchable_slowdown(se_log: float, df: int, level: float, threshold: float) -> float | None:
    """The smallest slowdown s of one gated figure (a latency x (1 + s), a throughput / (1 + s))
    that the gate fails on in GATE_POWER of comparisons if se_log were the true spread; None
    past a factor of REACH_CAP. The rule and its limits:
    docs/comparing-runs.md#what-the-gate-says-it-could-have-caught."""
    critical = t_upper(level, df)
    log_factor = math.log1p(threshold) + se_log * shift_for_power(GATE_POWER, critical, df)
    return None if log_factor > math.log(REACH_CAP) else math.expm1(log_factor)


def reach_text(slowdown: float | None) -> str:
    return f"beyond x{REACH_CAP:.0f}" if slowdown is None else f"{slowdown * 100:.0f} %"


def gate_reach(record: dict, patterns: list[str]) -> dict:
    """What the gate could have caught: per comparison and tested figure its catchable_slowdown at
    Holm's strictest level, GATE_ALPHA over the figures tested, with the level and degrees of
    freedom it was taken at, and one line giving their range, for the page and the exit line."""
    figures = {}
    for comparison in record["comparisons"]:
        tested = tested_figures(comparison, patterns)
        level = GATE_ALPHA / len(tested) if tested else None
        pair = f" ({comparison['candidate']} / {comparison['baseline']})" if len(record["comparisons"]) > 1 else ""
        for figure in tested:
            df = min(figure["baseline"]["n"], figure["candidate"]["n"]) - 1  # Welch's fewest
            figures[figure["key"] + pair] = {
                "slowdown": catchable_slowdown(figure["se_log"], df, level, record["threshold"]),
                "level": level,
                "tested": len(tested),
                "df": df,
            }
    capacities = any(
        gated(c["key"], patterns) for comparison in record["comparisons"] for c in comparison.get("capacities", [])
    )
    if not figures:
        line = "the gate tested no serving or offline figure with an interval, so it states no slowdown it could catch"
    else:
        ordered = sorted(
            figures.items(), key=lambda item: math.inf if item[1]["slowdown"] is None else item[1]["slowdown"]
        )
        (first, low), (last, high) = ordered[0], ordered[-1]
        low, high = reach_text(low["slowdown"]), reach_text(high["slowdown"])
        if low == high:
            span = f"{low} ({first}" + (f" and {len(ordered) - 1} more)" if len(ordered) > 1 else ")")
        else:
            span = f"{low} ({first}) to {high} ({last})"
        line = (
            f"were these runs' own spread the true one, the gate would catch a slowdown of {span} or more "
            f"{GATE_POWER * 100:.0f} % of the time (a latency x (1 + s), a throughput / (1 + s)); "
            "their spread is itself uncertain and drift between runs is not in it, so across runs it catches less "
            "(docs/comparing-runs.md)"
        )
    if capacities:
        line += "; gated SLO capacities are judged by their intervals, their reach not stated"
    return {"power": GATE_POWER, "figures": figures, "line": line}


def gate_record(record: dict, patterns: list[str]) -> dict:
    """The gate as the JSON holds it: its patterns and rule, the regressions (empty: passed) and its reach."""
    return {
        "patterns": patterns,
        "regressions": gate(record, patterns),
        "method": GATE_METHOD,
        "reach": gate_reach(record, patterns),
    }


def comparison_record(runs: list[RunResults], threshold: float, labels: list[str] | None = None) -> dict:
    """The whole comparison: runs (the first is the baseline), what differs, and each candidate
    against the baseline."""
    differences = provenance_differences(runs)
    for run, label in zip(runs, labels or auto_labels(runs, differences)):
        run.label = label
    baseline, *candidates = runs
    return {
        "threshold": threshold,
        "runs": [
            {"label": run.label, "source": run.source, "tool": run.tool, "models": sorted(run.models)} for run in runs
        ],
        "differences": differences,
        "comparisons": [compare_runs(baseline, candidate, threshold) for candidate in candidates],
    }
