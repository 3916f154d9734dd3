"""One validity check's record: what must hold for a stage's numbers to mean what they say."""

from __future__ import annotations

# Worst first: a reader sees failures before warnings. not_available: the check needs what
# this server does not publish (an external endpoint without vLLM's /metrics).
STATUS_RANK = {"fail": 0, "warn": 1, "pending": 2, "not_available": 3, "pass": 4}
# Shares of one core a client process may use before its own delays are in the numbers: from
# CLIENT_WARN a level warns; from CLIENT_FAIL a level fails and a capacity probe's limit is the
# client (docs/method.md#client-limited-probes).
CLIENT_WARN = 0.5
CLIENT_FAIL = 0.8


def check(name: str, status: str, value, detail: str) -> dict:
    return {"name": name, "status": status, "value": value, "detail": detail}


def passes(condition: bool) -> str:
    return "pass" if condition else "fail"


def not_available(name: str, needs: str) -> dict:
    return check(name, "not_available", None, f"not available: needs {needs}, which this endpoint does not publish")
