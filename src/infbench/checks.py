"""One validity check's record: what must hold for a stage's numbers to mean what they say."""

from __future__ import annotations

# Worst first: a reader sees failures before warnings.
STATUS_RANK = {"fail": 0, "warn": 1, "pending": 2, "pass": 3}


def check(name: str, status: str, value, detail: str) -> dict:
    return {"name": name, "status": status, "value": value, "detail": detail}


def passes(condition: bool) -> str:
    return "pass" if condition else "fail"
