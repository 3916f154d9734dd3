"""One validity check's record: what must hold for a stage's numbers to mean what they say."""

from __future__ import annotations

# Worst first: a reader sees failures before warnings. not_available: the check needs what
# this server does not publish (an external endpoint without vLLM's /metrics).
STATUS_RANK = {"fail": 0, "warn": 1, "pending": 2, "not_available": 3, "pass": 4}


def check(name: str, status: str, value, detail: str) -> dict:
    return {"name": name, "status": status, "value": value, "detail": detail}


def passes(condition: bool) -> str:
    return "pass" if condition else "fail"


def not_available(name: str, needs: str) -> dict:
    return check(name, "not_available", None, f"not available: needs {needs}, which this endpoint does not publish")
