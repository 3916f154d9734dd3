"""Engine settings derived from the config, identical for every engine that is measured:
the same cores, the same thread count, the same dtype."""

from __future__ import annotations

import os

from infbench.core.errors import UserError

GIB = 1 << 30


def bound_cpus(threads: int) -> list[int]:
    """The first `threads` CPUs this process may use; every engine is pinned to these."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if threads > len(allowed):
        raise UserError(
            f"hardware.threads = {threads} but only {len(allowed)} CPUs are available here; "
            f"set hardware.threads to at most {len(allowed)} in config/config.yaml"
        )
    return allowed[:threads]


def cpu_list(cpus: list[int]) -> str:
    return ",".join(map(str, cpus))


def engine_env(threads: int, device: str) -> dict:
    """Environment for an engine process: thread counts, and on CPU the cores vLLM binds its
    OpenMP threads to (its default `auto` may reserve a core, giving vLLM fewer threads than HF)."""
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if device == "cpu":
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_list(bound_cpus(threads))
    return env


def pin_process(threads: int, device: str) -> list[int]:
    """Pin this process (and what it spawns) to the benchmark CPUs and set the thread counts.
    Must run before torch creates its thread pool."""
    cpus = bound_cpus(threads)
    os.environ.update(engine_env(threads, device))
    if device == "cpu" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    return cpus


def kv_cache_bytes(kv_cache_gib: float) -> int:
    return int(kv_cache_gib * GIB)


def vllm_engine_args(model_dir: str, dtype: str, engine: dict, seed: int, device: str) -> dict:
    """Keyword arguments for vllm.LLM (and, as flags, for the server)."""
    args = {
        "model": str(model_dir),
        "dtype": dtype,
        "max_model_len": engine["max_model_len"],
        "kv_cache_memory_bytes": kv_cache_bytes(engine["kv_cache_gib"]),
        "block_size": engine["block_size"],
        "enable_prefix_caching": engine["enable_prefix_caching"],
        "seed": seed,
        "disable_log_stats": False,
    }
    if engine.get("max_num_seqs"):
        args["max_num_seqs"] = engine["max_num_seqs"]
    if device == "cpu":
        # CUDA graphs and torch.compile do not apply on CPU; eager mode as in the study.
        args["enforce_eager"] = True
    return args


def pin_threads(cpus: set[int]) -> None:
    """Every thread of this process onto `cpus` (place_client; undone with the CPUs it had before
    another server starts, which must see and inherit them all)."""
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:  # the thread ended meanwhile
            continue


def place_client(threads: int, device: str) -> dict:
    """Keep a load client (this process, every thread) off the cores the engine's OpenMP threads
    are bound to, where the machine has others; call after the server has started, so that it
    does not inherit the restriction. Returns where each side runs, for the artifact."""
    allowed = set(os.sched_getaffinity(0))
    engine = set(bound_cpus(threads)) if device == "cpu" else set()
    free = allowed - engine
    if free:
        pin_threads(free)
    client = free or allowed
    shares = bool(engine & client)
    if device != "cpu":
        note = "the engine computes on the GPU; the client may run on every CPU"
    elif shares:
        note = (
            f"this machine has no CPU besides the engine's {len(engine)}: the client shares them, so its own "
            "CPU time is taken from the engine (see each level's client_ceiling check)"
        )
    else:
        note = "the client runs on CPUs the engine's threads are not bound to"
    return {
        "engine_cpus": sorted(engine),
        "client_cpus": sorted(client),
        "client_shares_engine_cores": shares,
        "note": note,
    }


def server_max_num_seqs(engine: dict) -> dict:
    """The cap on running requests the vLLM server runs with: the config's engine.max_num_seqs,
    else vLLM's own default for its OpenAI server on this machine's platform (EngineArgs'
    get_batch_defaults: 128 on CPU; 256 or 1024 on GPUs by the device's memory and name), at
    most max_num_batched_tokens (the config's or the same defaults'), as vLLM caps it. Read
    here because it depends on the device: call it on the machine the server runs on. The
    servers run one engine (world size 1) in vLLM's default performance mode."""
    if engine.get("max_num_seqs"):
        return {"value": int(engine["max_num_seqs"]), "source": "engine.max_num_seqs"}
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    batched_tokens, max_num_seqs = EngineArgs.get_batch_defaults(world_size=1)
    default = int(max_num_seqs[UsageContext.OPENAI_API_SERVER])
    budget = int(engine.get("max_num_batched_tokens") or batched_tokens[UsageContext.OPENAI_API_SERVER])
    source = "vLLM's default for its OpenAI server on this device (EngineArgs.get_batch_defaults)"
    if budget < default:
        return {"value": budget, "source": f"{source}, capped at max_num_batched_tokens = {budget}"}
    return {"value": default, "source": source}
