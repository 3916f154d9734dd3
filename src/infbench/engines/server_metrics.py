"""vLLM's Prometheus `/metrics`: the gauges and counters kept in a level's time series, the
periodic scrape, and the KV-cache facts the server publishes as labels."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from infbench.engines.vllm_server import ServerError

# Server metrics kept in the time series (vLLM 0.32 names).
GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")
COUNTERS = ("vllm:num_preemptions", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
# Histograms of what vLLM times per request, kept as their `_sum` and `_count` (time_breakdown).
HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_time_per_output_token_seconds",
)


@dataclass
class MetricsSeries:
    samples: list[dict] = field(default_factory=list)  # {t, <metric>: value}
    available: bool = True  # False: the server publishes no /metrics, so nothing was scraped

    def first_last(self, name: str) -> tuple[float, float]:
        values = [s[name] for s in self.samples if name in s]
        return (values[0], values[-1]) if values else (0.0, 0.0)

    def peak(self, name: str) -> float | None:
        """The highest sample (0 if none caught it), None where /metrics is not available."""
        if not self.available:
            return None
        return max((s[name] for s in self.samples if name in s), default=0.0)


def parse_metrics(text: str) -> dict:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            counter = sample.name.endswith("_total") and sample.name.removesuffix("_total") in COUNTERS
            histogram = family.name in HISTOGRAMS and sample.name in (f"{family.name}_sum", f"{family.name}_count")
            if sample.name in GAUGES or counter or histogram:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


class MetricsScraper:
    """Scrapes /metrics every `interval_s` in its own thread, off the event loop that times the
    streams, and keeps the raw text with its perf_counter time; parsing waits until the level
    is over. One scrape on entry and one on exit, synchronous, bound the level, so counter
    deltas (preemptions, prefix-cache hits) miss nothing before the first periodic scrape or
    after the last. Disabled (an endpoint without /metrics), it scrapes nothing."""

    def __init__(self, base_url: str, interval_s: float, enabled: bool = True):
        self.interval_s, self.enabled = interval_s, enabled
        self.raw: list[tuple[float, float, str]] = []  # (asked, answered, text), perf_counter times
        self._client = httpx.Client(base_url=base_url, timeout=2.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)

    def _scrape(self) -> None:
        asked = time.perf_counter()
        try:
            text = self._client.get("/metrics").text
        except httpx.HTTPError:
            return
        self.raw.append((asked, time.perf_counter(), text))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._scrape()

    def __enter__(self):
        if self.enabled:
            self._scrape()
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            self._stop.set()
            self._thread.join()
            self._scrape()
        self._client.close()

    def series(self, started: float) -> MetricsSeries:
        """The parsed samples, timed from `started` (the entry scrape is slightly before it): `t`
        when the answer arrived, `scrape_s` how long it took (the server read its gauges
        somewhere in between)."""
        samples = [
            {"t": answered - started, "scrape_s": answered - asked, **parse_metrics(text)}
            for asked, answered, text in sorted(self.raw)
        ]
        return MetricsSeries(samples, available=self.enabled)


def server_kv_facts(base_url: str) -> dict:
    """The engine's KV-cache facts from the `vllm:cache_config_info` metric's labels."""
    text = httpx.get(f"{base_url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.rindex("}")].split('",'))
            labels = {key.strip(): value.strip('"') for key, value in labels.items()}
            return {
                "num_blocks": int(labels["num_gpu_blocks"]),
                "block_size": int(labels["block_size"]),
                "kv_capacity_tokens": int(labels.get("kv_cache_size_tokens", 0)) or None,
                "max_concurrency_at_max_model_len": float(labels["kv_cache_max_concurrency"])
                if "kv_cache_max_concurrency" in labels
                else None,
                "prefix_caching": labels.get("enable_prefix_caching") == "True",
            }
    raise ServerError("the server's /metrics has no vllm:cache_config_info; is this a vLLM server?")
