"""The validity checks a reader must see before the numbers, gathered from every artifact,
worst first."""

from __future__ import annotations

from infbench.capacity.search import OUTCOME_FIXES, OUTCOMES
from infbench.capacity.slo_capacity import LAG_GROWTH_BEHIND
from infbench.core.checks import STATUS_RANK
from infbench.report.capacity import capacity_text, load_text
from infbench.report.serving import level_label


def collect_checks(model: str, artifacts: dict) -> list[dict]:
    """Every pass/warn/fail a reader should see first, worst first."""
    checks = []
    for level in (artifacts.get("load") or {}).get("levels", []):
        for item in level["checks"]:
            checks.append({"model": model, "stage": f"load {level_label(level)}", **item})
    fidelity = artifacts.get("client_fidelity")
    if fidelity:
        checks += [{"model": model, "stage": "client fidelity", **item} for item in fidelity["checks"]]
    prefix = artifacts.get("prefix_caching")
    if prefix:
        checks += [{"model": model, "stage": "prefix caching", **item} for item in prefix["checks"]]
    allocator = artifacts.get("allocator")
    if allocator:
        pool = allocator["pool_sizing_check"]
        checks.append(
            {
                "model": model,
                "stage": "allocator",
                "name": "vLLM's pool-sizing formula reproduced",
                "status": pool["status"],
                "value": pool["predicted"]["num_blocks"],
                "detail": f"{pool['formula']} gives {pool['predicted']['num_blocks']} blocks, vLLM allocated "
                f"{pool['vllm']['num_blocks']}: confirms {pool['confirms']}",
            }
        )
        checks.append(
            {
                "model": model,
                "stage": "allocator",
                "name": "study table reproduced",
                "status": "pass" if allocator["study"]["matches_study"] else "fail",
                "value": None,
                "detail": "parts 3 and 4 of the study recomputed exactly",
            }
        )
    live = artifacts.get("kv_validation")
    if live:
        checks.append(
            {
                "model": model,
                "stage": "kv validation",
                "name": "scraped KV blocks on demand, not reserved",
                "status": live["status"],
                "value": live.get("max_outside_share"),
                "detail": live["detail"],
            }
        )
    paging = artifacts.get("paging_live")
    for server in (paging or {}).get("servers", []):
        checks += [
            {"model": model, "stage": "paging live", **item, "name": f"{server['name']}: {item['name']}", "value": None}
            for item in server["checks"]
        ]
    capacity = artifacts.get("slo_capacity")
    for mode in ("concurrency", "request_rate"):
        search = (capacity or {}).get(mode)
        if search:
            checks.append(
                {
                    "model": model,
                    "stage": "slo capacity",
                    "name": f"{mode.replace('_', ' ')} search converged",
                    "status": "pass" if search["converged"] else "warn",
                    "value": search["capacity"],
                    "detail": f"{len(search['probes'])} probes; capacity {capacity_text(mode, search)}, first failing "
                    f"{load_text(mode, search['first_failing'])}: {OUTCOMES[search['outcome']]}"
                    + ("" if search["converged"] else f" ({OUTCOME_FIXES[search['outcome']]})"),
                }
            )
            rises = search["attainment_rises"]
            measured = sum("attainment_ci95" in probe for probe in search["probes"])
            checks.append(
                {
                    "model": model,
                    "stage": "slo capacity",
                    "name": f"{mode.replace('_', ' ')} search: attainment falls as load rises",
                    "status": "fail" if rises else ("pass" if measured >= 2 else "not_available"),
                    "value": len(rises),
                    "detail": (
                        "attainment rose beyond both 95 % intervals from "
                        + ", ".join(f"{load_text(mode, a)} to {load_text(mode, b)}" for a, b in rises)
                        + ": the probes measured something besides the load (the machine's speed drifting?)"
                    )
                    if rises
                    else f"no probe's attainment interval lies wholly above a lower load's ({measured} probes)"
                    if measured >= 2
                    else "one probe: nothing to compare",
                }
            )
            if mode == "concurrency":
                kv_limit = search["kv_limit"]
                checks.append(
                    {
                        "model": model,
                        "stage": "slo capacity",
                        "name": "KV-limited concurrency within the bounds a full pool sets",
                        "status": kv_limit["status"] if kv_limit else "not_available",
                        "value": kv_limit["measured"] if kv_limit else None,
                        "detail": kv_limit["detail"]
                        if kv_limit
                        else f"KV memory did not bind the search ({search['binding']['limit'].replace('_', ' ')} did): "
                        "nothing to compare with the simulator's prediction",
                    }
                )
            if mode == "request_rate":
                behind = [probe["load"] for probe in search["probes"] if probe.get("client_behind")]
                checks.append(
                    {
                        "model": model,
                        "stage": "slo capacity",
                        "name": "request rate search: the client kept its schedule",
                        "status": "warn" if behind else "pass",
                        "value": len(behind),
                        "detail": (
                            f"the client's send lag grew by over {LAG_GROWTH_BEHIND:.0%} of a window (it sent at "
                            "under about 90 % of the rate) at "
                            + ", ".join(load_text(mode, load) for load in behind)
                            + ": those rates were not offered, so they are not met and not in the fitted capacity "
                            "(the capacity probes run one client process: on a machine whose cores the engine uses, it "
                            "shares them; elsewhere the rate is above one process's ceiling)"
                        )
                        if behind
                        else f"no probe's send lag grew by over {LAG_GROWTH_BEHIND:.0%} of its window",
                    }
                )
    agreement = (capacity or {}).get("reproducibility")
    if agreement:
        checks.append(
            {
                "model": model,
                "stage": "slo capacity",
                "name": "independent searches agree",
                "status": agreement["status"],
                "value": agreement["spread"],
                "detail": agreement["detail"],
            }
        )
    comparison = artifacts.get("comparison")
    if comparison:
        checks += [{"model": model, "stage": "offline", **item} for item in comparison["checks"]]
        agreement = comparison["agreement"]
        checks.append(
            {
                "model": model,
                "stage": "offline",
                "name": "HF and vLLM run the same weights",
                "status": "fail" if agreement["flagged"] else "pass",
                "value": agreement.get("consistency"),
                "detail": agreement["note"],
            }
        )
    for name in ("hf_baseline", "vllm_offline"):
        artifact = artifacts.get(name)
        if artifact and artifact["provenance"]["git"].get("dirty"):
            checks.append(
                {
                    "model": model,
                    "stage": name,
                    "name": "code version recorded",
                    "status": "warn",
                    "value": artifact["provenance"]["git"]["commit"],
                    "detail": "measured with uncommitted changes in the working tree",
                }
            )
    return sorted(checks, key=lambda c: STATUS_RANK.get(c["status"], 9))


def checks_view(checks: list[dict]) -> dict:
    """The checks as the page opens with them: those that need attention, worst first, and those
    that passed."""
    problems = [c for c in checks if c["status"] != "pass"]
    return {
        "count": len(checks),
        "problems": problems,
        "passed": [c for c in checks if c["status"] == "pass"],
        "worst": checks[0]["status"] if checks else "pass",
    }
