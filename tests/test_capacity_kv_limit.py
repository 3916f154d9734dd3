"""Where KV memory binds the capacity search, the requests the server ran at once must lie
within bounds any server running those requests keeps: worked by hand, and the stage's check
failing on a planted measurement outside them."""

from infbench.capacity.checks import capacity_checks
from infbench.kv.capacity_bounds import kv_limit_agreement
from infbench.serving.client import LoadRequest

# 100 usable blocks of 16 tokens. The largest request: 40 prompt + 60 output tokens, 7 blocks at
# its peak (100 tokens); the smallest prompt: 20 tokens, 2 blocks.
KV = {"num_blocks": 101, "block_size": 16, "prefix_caching": False}
REQUESTS = [LoadRequest("small", "p", 20, 10), LoadRequest("large", "p", 40, 60)]


def test_the_bounds_are_the_largest_peak_and_the_smallest_prompt():
    inside = kv_limit_agreement(30.0, REQUESTS, KV, predicted=22)
    # Memory binds with at most 7 blocks free: at least (100 - 7) // 7 = 13 ran; at most 100 // 2 = 50.
    assert (inside["at_least"], inside["at_most"], inside["status"]) == (13, 50, "pass")
    assert kv_limit_agreement(13.0, REQUESTS, KV, 22)["status"] == "pass"  # inclusive
    assert kv_limit_agreement(50.0, REQUESTS, KV, 22)["status"] == "pass"
    below = kv_limit_agreement(12.0, REQUESTS, KV, 22)  # planted: fewer than any full pool holds
    assert below["status"] == "fail" and "not the one it reported" in below["detail"]
    assert kv_limit_agreement(51.0, REQUESTS, KV, 22)["status"] == "fail"  # more than fit at their prompts
    # Prefix caching shares blocks: no upper bound, the lower one stays.
    shared = {**KV, "prefix_caching": True}
    assert kv_limit_agreement(80.0, REQUESTS, shared, 22)["at_most"] is None
    assert kv_limit_agreement(80.0, REQUESTS, shared, 22)["status"] == "pass"
    assert kv_limit_agreement(12.0, REQUESTS, shared, 22)["status"] == "fail"


def search(kv_limit, limit="kv_memory") -> dict:
    return {
        "converged": True,
        "capacity": 16,
        "first_failing": 24,
        "outcome": "bracketed",
        "attainment_rises": [],
        "probes": [
            {"load": load, "attainment_ci95": ci, "client_limited": False}
            for load, ci in ((16, [0.9, 1.0]), (24, [0.1, 0.3]))
        ],
        "binding": {"at": 24, "limit": limit, "evidence": "..."},
        "kv_limit": kv_limit,
        "estimate": {"value": 17, "ci95": [16, 20]},
    }


def test_the_report_check_fails_outside_the_bounds_and_is_not_available_where_memory_did_not_bind():
    def kv_check(concurrency):
        checks = capacity_checks({"concurrency": concurrency})
        return next(c for c in checks if c["name"] == "KV-limited concurrency within the bounds a full pool sets")

    assert kv_check(search(kv_limit_agreement(30.0, REQUESTS, KV, 22)))["status"] == "pass"
    assert kv_check(search(kv_limit_agreement(12.0, REQUESTS, KV, 22)))["status"] == "fail"
    free = kv_check(search(None, limit="compute"))
    assert free["status"] == "not_available" and "compute did" in free["detail"]
