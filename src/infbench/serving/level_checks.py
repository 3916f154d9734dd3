"""Validity checks of one load level: what must hold for its numbers to mean what they say."""

from __future__ import annotations

from infbench.core.checks import check, not_available
from infbench.serving.client import LevelRun

CLIENT_CPU_WARN = 0.8  # share of one core the client may use before its timing is suspect
DISPATCH_LAG_WARN_S = 0.05


def open_loop_rates(run: LevelRun) -> dict | None:
    """Offered, sent and achieved request rates of an open-loop level, over the sample itself:

    offered  = N / last scheduled send
    sent     = (n - 1) / span of actual sends
    achieved = (n - 1) / span of completions (a server that keeps up completes requests as fast
               as they were sent; completed / duration would read low even then, because the
               duration includes the last request's own latency)
    dispatch lag = the latest a request left the client after its scheduled time
    """
    done = [s for s in run.results if s.result.success]
    if not run.scheduled or len(done) < 2:
        return None
    sends = sorted(s.sent_at for s in run.results)
    completions = sorted(s.sent_at + s.result.e2el for s in done)
    return {
        "offered": len(run.scheduled) / run.scheduled[-1],
        "sent": (len(sends) - 1) / (sends[-1] - sends[0]),
        "achieved": (len(completions) - 1) / (completions[-1] - completions[0]),
        "dispatch_lag": max(
            (s.sent_at - run.results[0].sent_at) - (when - run.scheduled[0])
            for s, when in zip(run.results, run.scheduled)
        ),
    }


def validity_checks(run: LevelRun, requests, tokenizer, prefix_caching: bool) -> list[dict]:
    results = [s.result for s in run.results]
    failed = sum(not r.success for r in results)
    checks = [
        check("failed_requests", "fail" if failed else "pass", failed, f"{failed} of {len(results)} requests failed")
    ]
    done = [s for s in run.results if s.result.success]
    asked = {r.id: r.max_tokens for r in requests}
    short = sum(s.result.output_tokens < asked[s.result.request_id] for s in done)
    checks.append(
        check(
            "short_outputs",
            "fail" if short else "pass",
            short,
            f"{short} outputs shorter than their max_tokens (ignore_eos should prevent it)",
        )
    )
    if tokenizer is not None and done:
        diffs = [
            abs(len(tokenizer(s.text, add_special_tokens=False)["input_ids"]) - s.result.output_tokens) for s in done
        ]
        mean_diff = sum(diffs) / len(diffs)
        checks.append(
            check(
                "usage_vs_retokenized",
                "pass" if mean_diff <= 1 else "warn",
                mean_diff,
                f"mean |re-tokenized text - usage.completion_tokens| = {mean_diff:.2f} tokens; usage is "
                "what the metrics use (text re-tokenizes differently at merges)",
            )
        )
    cpu_share = run.client_cpu_s / run.duration_s
    checks.append(
        check(
            "client_cpu",
            "warn" if cpu_share > CLIENT_CPU_WARN else "pass",
            cpu_share,
            f"the client used {cpu_share:.0%} of a core; above {CLIENT_CPU_WARN:.0%} its own delays inflate latencies",
        )
    )
    rates = open_loop_rates(run)
    if rates is not None:
        achieved, sent = rates["achieved"], rates["sent"]
        checks.append(
            check(
                "achieved_vs_offered_rate",
                "pass" if achieved >= 0.9 * sent else "warn",
                achieved / sent,
                f"completions came at {achieved:.2f} req/s for {sent:.2f} req/s sent "
                f"({rates['offered']:.2f} offered); below 90 % the server is saturated and queueing "
                "dominates latency",
            )
        )
        lag = rates["dispatch_lag"]
        checks.append(
            check(
                "dispatch_lag",
                "pass" if lag <= DISPATCH_LAG_WARN_S else "warn",
                lag,
                f"requests left the client up to {lag * 1000:.0f} ms after their scheduled time",
            )
        )
    if not run.metrics.available:
        return checks + [
            not_available(name, "vLLM's /metrics") for name in ("metrics_coverage", "prefix_cache_hit_rate")
        ]
    busy = [sample for sample in run.metrics.samples if sample.get("vllm:num_requests_running", 0) > 0]
    checks.append(
        check(
            "metrics_coverage",
            "pass" if len(busy) >= 2 else "warn",
            len(busy),
            f"{len(busy)} /metrics samples caught requests running during this {run.duration_s:.1f} s "
            "level; with fewer than 2 the server-state figures miss the level: lower "
            "load.metrics_interval_s or raise load.requests_per_level",
        )
    )
    queries = run.metrics.first_last("vllm:prefix_cache_queries_total")
    hits = run.metrics.first_last("vllm:prefix_cache_hits_total")
    asked_tokens = queries[1] - queries[0]
    hit_rate = (hits[1] - hits[0]) / asked_tokens if asked_tokens else 0.0
    flattering = hit_rate > 0.1
    checks.append(
        check(
            "prefix_cache_hit_rate",
            "warn" if flattering else "pass",
            hit_rate,
            f"prefix-cache hit rate {hit_rate:.0%} (prefix caching {'on' if prefix_caching else 'off'}); "
            "a high rate means repeated prompts skip prefill and flatter TTFT",
        )
    )
    return checks
