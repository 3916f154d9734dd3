"""The validity checks a reader must see before the numbers: read from every artifact, where
each stage stored its own (core/checks.py gives their shape), worst first. Nothing here judges
a measurement; an artifact from before its stage stored checks contributes none."""

from __future__ import annotations

from infbench.core.checks import STATUS_RANK
from infbench.report.serve import level_label
from infbench.stages import STAGES

# Each artifact under the name of the stage that wrote it, as the checks table labels it.
STAGE_OF = {artifact: stage.name.replace("_", " ") for stage in STAGES for artifact in stage.outputs}


# The artifacts whose schemas require a top-level `checks` list.
STORES_CHECKS = frozenset(
    {"allocator", "offline_comparison", "kv_validation", "client_fidelity", "prefix_caching", "capacity"}
)
OLDER_ARTIFACT = {
    "name": "checks stored with the artifact",
    "status": "not_available",
    "value": None,
    "detail": "this artifact was written before its stage stored its checks: rerun the stage to see them",
}


def stored_checks(name: str, artifact) -> list[tuple[str, list[dict]]]:
    """(stage label, checks) as an artifact stores them: per load level in the load sweep, per
    server in the live paging stage, else in its top-level `checks`."""
    if not isinstance(artifact, dict):
        return []
    if name == "load":
        return [(f"load {level_label(level)}", level["checks"]) for level in artifact["levels"]]
    if name == "paging_live":
        return [
            (STAGE_OF[name], [{**item, "name": f"{server['name']}: {item['name']}"} for item in server["checks"]])
            for server in artifact["servers"]
        ]
    if name in STORES_CHECKS and "checks" not in artifact:
        # Written before its stage stored checks: say so rather than let "all passed" hide them.
        return [(STAGE_OF[name], [OLDER_ARTIFACT])]
    return [(STAGE_OF.get(name, name), artifact.get("checks", []))]


def code_version_check(model: str, artifacts: dict) -> list[dict]:
    """A warning where any artifact's provenance records a working tree with uncommitted
    changes: its commit does not name the code that measured it."""
    dirty = {
        name: artifact["provenance"]["git"]["commit"]
        for name, artifact in artifacts.items()
        if isinstance(artifact, dict) and artifact.get("provenance", {}).get("git", {}).get("dirty")
    }
    if not dirty:
        return []
    return [
        {
            "model": model,
            "stage": "provenance",
            "name": "code version recorded",
            "status": "warn",
            "value": ", ".join(sorted(set(dirty.values()))),
            "detail": f"measured with uncommitted changes in the working tree: {', '.join(dirty)}",
        }
    ]


def collect_checks(model: str, artifacts: dict) -> list[dict]:
    """Every check one model's artifacts store, labelled with the model and stage, worst first."""
    checks = [
        {"model": model, "stage": stage, "value": None, **item}
        for name, artifact in artifacts.items()
        for stage, items in stored_checks(name, artifact)
        for item in items
    ]
    checks += code_version_check(model, artifacts)
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
