"""The SLO capacity stage's validity checks, stored in capacity.json: each search converged,
its attainment fell as load rose, the KV-limited concurrency lies within the bounds a full pool
sets, the client was not the limit of any probe, every users probe held its users (Little's
law), and every run of capacity.runs completed and converged."""

from __future__ import annotations

from infbench.capacity.probe import client_evidence
from infbench.core.capacity_terms import (
    HELD_CYCLES,
    OUTCOME_FIXES,
    OUTCOMES,
    SEARCHES,
    USERS_HELD,
    capacity_text,
    load_text,
)
from infbench.core.checks import check
from infbench.serving.sessions import cycles_in, users_not_held


def converged(mode: str, search: dict) -> dict:
    outcome = search["outcome"]
    return check(
        f"{mode.replace('_', ' ')} search converged",
        "pass" if search["converged"] else "warn",
        search["capacity"],
        f"{len(search['probes'])} probes; capacity {capacity_text(mode, search)}, first failing "
        f"{load_text(mode, search['first_failing'])}: {OUTCOMES[outcome]}"
        + ("" if search["converged"] else f" ({OUTCOME_FIXES[outcome]})"),
    )


def attainment_falls(mode: str, search: dict) -> dict:
    rises = search["attainment_rises"]
    measured = sum("attainment_ci95" in probe for probe in search["probes"])
    if rises:
        status, detail = (
            "fail",
            "attainment rose beyond both 95 % intervals, or from a load decided missed to a higher one decided met, "
            "from "
            + ", ".join(f"{load_text(mode, a)} to {load_text(mode, b)}" for a, b in rises)
            + ": the probes measured something besides the load (the machine's speed drifting?)",
        )
    elif measured >= 2:
        status, detail = "pass", f"no probe's attainment interval lies wholly above a lower load's ({measured} probes)"
    else:
        status, detail = "not_available", "one probe: nothing to compare"
    return check(f"{mode.replace('_', ' ')} search: attainment falls as load rises", status, len(rises), detail)


def kv_limit_within_bounds(search: dict) -> dict:
    name = "KV-limited concurrency within the bounds a full pool sets"
    kv_limit = search["kv_limit"]
    if kv_limit is None:
        return check(
            name,
            "not_available",
            None,
            f"KV memory did not bind the search ({search['binding']['limit'].replace('_', ' ')} did): "
            "nothing to compare with the simulator's prediction",
        )
    return check(name, kv_limit["status"], kv_limit["measured"], kv_limit["detail"])


def client_not_the_limit(mode: str, search: dict) -> dict:
    limited = [probe for probe in search["probes"] if probe["client_limited"]]
    detail = (
        "; ".join(f"{load_text(mode, probe['load'])}: {client_evidence(probe)}" for probe in limited)
        + ": those probes did not measure the server, so they are not met and not in the fitted capacity "
        "(docs/method.md#client-limited-probes)"
        if limited
        else "no probe's client was the limit (docs/method.md#client-limited-probes)"
    )
    name = f"{mode.replace('_', ' ')} search: the client was not the limit"
    return check(name, "warn" if limited else "pass", len(limited), detail)


def users_held(search: dict) -> dict:
    """Every users probe held its users: L x (R + Z) / R within USERS_HELD of them. Users are in
    flight or thinking by construction, so this catches what breaks that: users whose tasks
    stopped, turns that never ended. Judged on the probes whose windows span HELD_CYCLES of a
    user's cycles (shorter ones read low)."""
    name = "users search: every probe held its users"
    taken = [probe for probe in search["probes"] if probe["sessions"]["users_from_littles_law"] is not None]
    judged = [p for p in taken if cycles_in(p["sessions"], p["window"]["seconds"]) >= HELD_CYCLES]
    short = len(taken) - len(judged)
    not_judged = (
        f"not judged: {short} of {len(taken)} probes, whose windows span fewer than {HELD_CYCLES} of a user's "
        "cycles (R + Z) and read low; raise capacity.window_s to judge them"
    )
    if not judged:
        why = not_judged if taken else "no probe took a think time"
        return check(name, "not_available", None, f"not available: {why} (docs/method.md#sessions)")
    off = [
        f"{load_text('users', probe['load'])}: Little's law gives {probe['sessions']['users_from_littles_law']:.1f}"
        for probe in judged
        if users_not_held(probe["sessions"])
    ]
    found = (
        "; ".join(off) + f", more than {USERS_HELD:.0%} off"
        if off
        else f"in every probe judged, requests in flight x (response + think) / response lies within "
        f"{USERS_HELD:.0%} of the users"
    )
    notes = [not_judged] if short else []
    return check(
        name, "warn" if off else "pass", len(off), f"{found} ({'; '.join([*notes, 'docs/method.md#sessions'])})"
    )


def capacity_checks(record: dict) -> list[dict]:
    """The checks of a capacity record (its `concurrency`, `request_rate` and `users` searches,
    each where it ran), in the shape every artifact's `checks` take (core/checks.py)."""
    checks = []
    for mode in SEARCHES:
        search = record.get(mode)
        if search:
            checks += [converged(mode, search), attainment_falls(mode, search), client_not_the_limit(mode, search)]
            if mode == "concurrency":
                checks.append(kv_limit_within_bounds(search))
            if mode == "users":
                checks.append(users_held(search))
    if "runs" in record:
        checks.append(runs_converged(record))
    return checks


def runs_converged(record: dict) -> dict:
    """capacity.runs from 2: every run completed and its concurrency search converged (the headline's
    own checks cover one run; a rerun interval over unconverged runs leans on their fitted points)."""
    shaky = [
        f"run {run['run']} {mode.replace('_', ' ')} search {run[mode]['outcome'].replace('_', ' ')}"
        for run in record["runs"]
        for mode in SEARCHES
        if mode in run and run[mode]["outcome"] != "bracketed"
    ]
    failed = [f"run {run['run']} failed: {run['error']}" for run in record.get("failed_runs", [])]
    count = len(record["runs"]) + len(failed)
    return check(
        "every capacity run completed and converged",
        "warn" if shaky or failed else "pass",
        len(shaky) + len(failed),
        "; ".join(failed + shaky) + f" (of {count} runs)" if shaky or failed else f"{count} runs, each bracketed",
    )
