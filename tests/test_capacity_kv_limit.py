"""Where KV memory binds the capacity search, the requests the server ran at once must lie
within the simulator's bounds for the same requests: worked by hand, and the report's check
failing on a planted measurement outside them."""

from infbench.capacity.slo_capacity import kv_limit_agreement
from infbench.report.checks import collect_checks
from infbench.serving.client import LoadRequest

# 100 usable blocks of 16 tokens. Each request: 20 prompt + 60 output tokens, 5 blocks at its
# peak (80 tokens), 2 blocks at admission (21 tokens).
KV = {"num_blocks": 101, "block_size": 16}
REQUESTS = [LoadRequest(f"r{i}", "p", 20, 60) for i in range(10)]


def test_the_bounds_are_the_peak_and_the_admission_footprints():
    inside = kv_limit_agreement(30.0, REQUESTS, KV, 512)
    assert (inside["at_least"], inside["at_most"]) == (100 // 5, 100 // 2) == (20, 50)
    assert inside["status"] == "pass"
    assert kv_limit_agreement(20.0, REQUESTS, KV, 512)["status"] == "pass"  # the bounds are inclusive
    # Fewer than fit at their peak footprints: the server's pool is smaller than it said.
    below = kv_limit_agreement(12.0, REQUESTS, KV, 512)
    assert below["status"] == "fail" and "not the simulator's" in below["detail"]
    assert kv_limit_agreement(51.0, REQUESTS, KV, 512)["status"] == "fail"
    assert kv_limit_agreement(None, REQUESTS, KV, 512)["status"] == "fail"  # no scrape: nothing measured


def search(kv_limit, limit="kv_memory") -> dict:
    return {
        "converged": True,
        "capacity": 16,
        "first_failing": 24,
        "outcome": "bracketed",
        "attainment_rises": [],
        "probes": [{"load": 16, "attainment_ci95": [0.9, 1.0]}, {"load": 24, "attainment_ci95": [0.1, 0.3]}],
        "binding": {"at": 24, "limit": limit, "evidence": "..."},
        "kv_limit": kv_limit,
        "estimate": {"value": 17, "ci95": [16, 20]},
    }


def test_the_report_check_fails_outside_the_bounds_and_is_not_available_where_memory_did_not_bind():
    def kv_check(concurrency):
        checks = collect_checks("m", {"slo_capacity": {"concurrency": concurrency}})
        return next(c for c in checks if c["name"] == "KV-limited concurrency within the simulator's bounds")

    assert kv_check(search(kv_limit_agreement(30.0, REQUESTS, KV, 512)))["status"] == "pass"
    assert kv_check(search(kv_limit_agreement(12.0, REQUESTS, KV, 512)))["status"] == "fail"
    free = kv_check(search(None, limit="compute"))
    assert free["status"] == "not_available" and "compute did" in free["detail"]
