"""The pipeline's stages in one table: when each runs, whether it runs against an external
endpoint, the artifacts it writes and the report section that shows them. Rule `all`, the
report's inputs, the run-time records, the report's section order and numbering (in the HTML
page and in `snakemake --report`) and which artifacts each section's view reads are all read
from here: adding a stage is one entry here plus its rule (and, for a new section, its view
module and partial). Kept light: the Snakefile imports it on every run, so views are named,
not imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    """A numbered section of the report: its template is report/sections/{name}.html.j2 and its
    view model `infbench.report.{name}.view(*artifacts)`, given the artifacts named in `reads`
    (None for one the run lacks) and returning None where the section is not shown. `beside`:
    the section it is read beside, without which it is not shown either."""

    name: str
    number: str
    title: str
    reads: tuple[str, ...]
    beside: str | None = None

    @property
    def view(self) -> str:
        """The dotted name of the view function."""
        return f"infbench.report.{self.name}.view"

    @property
    def category(self) -> str:
        """Its category in `snakemake --report`: the number and title the HTML page shows."""
        return f"{self.number}. {self.title}"


# fmt: off
SECTIONS = (
    Section("offline", "1–2", "Hugging Face baseline and vLLM offline, on the same work",
            ("hf_baseline", "vllm_offline", "offline_comparison")),
    Section("allocator", "3", "The KV-cache problem: the study's arithmetic, reproduced", ("allocator",)),
    Section("kv_validation", "4", "Paging: what the study left out", ("allocator", "kv_validation", "paging_live")),
    Section("serve", "5", "The OpenAI-compatible server under load", ("server", "load")),
    Section("client_fidelity", "5.1", "Is the client exact? vLLM's benchmark client beside ours",
            ("client_fidelity",), beside="serve"),
    Section("prefix_caching", "5.2", "Prefix caching off and on", ("prefix_caching",), beside="serve"),
    Section("tuning", "5.3", "Tuning grid", ("tuning",), beside="serve"),
    Section("variants", "5.4", "Variants measured in turns", ("variants",), beside="serve"),
    Section("capacity", "6", "How many users within the SLO", ("capacity",)),
    Section("paging_live", "7", "The study's 4.8x on vLLM itself", ("paging_live",)),
    Section("utilisation", "8", "Distance to the hardware: memory bandwidth utilisation", ("utilisation",)),
)
# fmt: on
SECTION = {section.name: section for section in SECTIONS}


def on(config: dict, key: str) -> bool:
    """Is the config section `key` switched on?"""
    return bool(config[key]["enabled"])


def external(config: dict) -> bool:
    """Does the serve stage measure the user's endpoint (server.external) rather than a server
    of its own?"""
    return config["server"]["external"] is not None


@dataclass(frozen=True)
class Stage:
    """One rule's place in the pipeline.

    outputs: {artifact name: the rule's output (its name, or 0 for the only one)}; the artifact
    name is the key the report and run comparisons read it under.
    enabled: when the stage runs, given the validated config.
    external: whether it runs when server.external is set. Stages that start a server of the
    local model or predict its KV cache from this config's engine would not describe the
    user's endpoint, so they do not run then.
    measured: whether the rule records a run time (a `benchmark:` file) for the report.
    tables: the rule's request tables (CSV, docs/method.md#request-tables) by output name:
    targets of rule `all`, named by the artifact that records them, read by no view.
    """

    name: str
    outputs: dict[str, str | int]
    section: str | None
    enabled: Callable[[dict], bool]
    external: bool
    measured: bool = False
    tables: tuple[str, ...] = ()

    def runs(self, config: dict) -> bool:
        return self.enabled(config) and (self.external or not external(config))


def utilisation_inputs(config: dict) -> list[str]:
    """The artifacts whose decode figures MBU is computed for: the offline engines, and the load
    sweep of this pipeline's own server (an external endpoint runs on another machine)."""
    names = [name for name in ("hf_baseline", "vllm_offline") if on(config, name)]
    return names + (["load"] if on(config, "server") and not external(config) else [])


def _always(config: dict) -> bool:
    return True


# fmt: off
STAGES = (
    Stage("model", {"model": 0}, None, _always, external=True),
    Stage("workload", {"workload": "requests", "workload_summary": "summary"}, None, _always, external=True),
    Stage("hf_baseline", {"hf_baseline": 0}, "offline", lambda c: on(c, "hf_baseline"),
          external=True, measured=True),
    Stage("vllm_offline", {"vllm_offline": 0}, "offline", lambda c: on(c, "vllm_offline"),
          external=True, measured=True),
    Stage("allocator", {"allocator": 0}, "allocator", lambda c: on(c, "vllm_offline"), external=True),
    Stage("offline_comparison", {"offline_comparison": 0}, "offline",
          lambda c: on(c, "hf_baseline") and on(c, "vllm_offline"), external=True),
    Stage("serve", {"server": "server", "load": "load"}, "serve", lambda c: on(c, "server"),
          external=True, measured=True, tables=("requests",)),
    Stage("kv_validation", {"kv_validation": 0}, "kv_validation", lambda c: on(c, "server"), external=False),
    Stage("client_fidelity", {"client_fidelity": "fidelity"}, "client_fidelity", lambda c: on(c, "client_fidelity"),
          external=False, measured=True),
    Stage("tuning", {"tuning": 0}, "tuning", lambda c: on(c, "tuning"), external=False, measured=True),
    Stage("variants", {"variants": 0}, "variants", lambda c: on(c, "variants"), external=False, measured=True),
    Stage("prefix_caching", {"prefix_caching": 0}, "prefix_caching", lambda c: on(c, "prefix_caching"),
          external=False, measured=True),
    Stage("capacity", {"capacity": "capacity"}, "capacity", lambda c: on(c, "capacity") and on(c, "server"),
          external=True, measured=True, tables=("requests",)),
    Stage("paging_live", {"paging_live": 0}, "paging_live", lambda c: on(c, "paging_live"),
          external=False, measured=True),
    Stage("utilisation", {"utilisation": 0}, "utilisation", lambda c: bool(utilisation_inputs(c)), external=True),
)
# fmt: on


def running_stages(config: dict) -> list[Stage]:
    """The stages this config runs, in the table's order (the order artifacts are listed in)."""
    return [stage for stage in STAGES if stage.runs(config)]


def section_of(stage: str) -> Section:
    """The report section that shows a stage's artifacts."""
    return SECTION[next(entry.section for entry in STAGES if entry.name == stage)]
