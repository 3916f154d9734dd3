# LLM-inference benchmarking pipeline: model -> workload -> HF baseline and vLLM offline ->
# KV-cache allocator analysis -> OpenAI-compatible server under load -> SLO capacity -> MBU ->
# HTML report.
# Run with `snakemake --cores 8`; see README.md.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


wildcard_constraints:
    model="|".join(map(re.escape, MODELS)),
    round=r"[2-9]|[1-9]\d+",


# Downloads need the network, and the report and MBU are seconds of work: on a cluster both run on
# the head node (compute nodes often have no internet).
localrules:
    download_model,
    html_report,
    utilisation,


include: "workflow/rules/model.smk"
include: "workflow/rules/workload.smk"
include: "workflow/rules/offline.smk"
include: "workflow/rules/serving.smk"
include: "workflow/rules/capacity.smk"
include: "workflow/rules/kv.smk"
include: "workflow/rules/utilisation.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        final_outputs(),
    default_target: True
