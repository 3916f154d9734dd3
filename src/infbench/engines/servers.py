"""One way to start a server: a specification built from the config (engine settings, device,
threads, start-up timeout, extra flags and environment), and one factory that every stage and
the client-fidelity benchmark script use. A stage that needs a variant (prefix caching on, a
tuning cell's flags, the study's pool) derives it from the specification, never from scratch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from infbench.engines.settings import engine_env, vllm_engine_args
from infbench.engines.vllm_server import VLLMServer


@dataclass(frozen=True)
class ServerSpec:
    """A vLLM server of the local model, as the config describes it.

    engine: the config's `engine` section (max_model_len, kv_cache_gib, block_size,
    enable_prefix_caching, max_num_seqs); flags: further server flags beyond the engine's
    (e.g. num_gpu_blocks_override, api_key); env: further environment variables; python: the
    interpreter whose vLLM starts the server (None: this one).
    """

    model_dir: str
    served_name: str
    dtype: str
    engine: dict
    seed: int
    device: str
    threads: int
    startup_timeout_s: float = 300
    flags: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    python: str | None = None

    @classmethod
    def from_config(cls, config: dict, model_dir: str | Path, served_name: str, dtype: str) -> ServerSpec:
        """From a config holding the sections `engine`, `hardware` (device, threads), `server`
        (startup_timeout_s) and `seed`, with the dtype the workflow resolved."""
        return cls(
            model_dir=str(model_dir),
            served_name=served_name,
            dtype=dtype,
            engine=dict(config["engine"]),
            seed=config["seed"],
            device=config["hardware"]["device"],
            threads=config["hardware"]["threads"],
            startup_timeout_s=config["server"]["startup_timeout_s"],
        )

    def with_engine(self, **changes) -> ServerSpec:
        """The same server with some engine settings changed."""
        return dataclasses.replace(self, engine={**self.engine, **changes})

    def with_flags(self, **flags) -> ServerSpec:
        return dataclasses.replace(self, flags={**self.flags, **flags})

    def with_env(self, **env) -> ServerSpec:
        return dataclasses.replace(self, env={**self.env, **env})

    def engine_args(self) -> dict:
        """vllm.LLM's keyword arguments for this engine (the server's flags before `flags`)."""
        return vllm_engine_args(self.model_dir, self.dtype, self.engine, self.seed, self.device)


def spec_from_params(params, model_dir: str | Path, served_name: str) -> ServerSpec:
    """A server rule's params (dtype, engine, seed, device, threads, server) as a specification:
    the one place where Snakemake's params become a server."""
    return ServerSpec(
        model_dir=str(model_dir),
        served_name=served_name,
        dtype=params.dtype,
        engine=dict(params.engine),
        seed=params.seed,
        device=params.device,
        threads=params.threads,
        startup_timeout_s=params.server["startup_timeout_s"],
    )


def start_server(spec: ServerSpec, log_path: str | Path) -> VLLMServer:
    """The server of `spec`, not yet started: enter it (`with`) or launch it with others
    (`vllm_server.started_together`); it is stopped on leaving either."""
    caching = bool(spec.engine.get("enable_prefix_caching"))
    server = VLLMServer(
        spec.engine_args(),
        spec.served_name,
        log_path,
        # With prefix caching, /reset_prefix_cache (a dev-mode endpoint) empties it between passes.
        env={**engine_env(spec.threads, spec.device), **({"VLLM_SERVER_DEV_MODE": "1"} if caching else {}), **spec.env},
        startup_timeout_s=spec.startup_timeout_s,
        extra_args=spec.flags or None,
        python=spec.python,
    )
    server.resets_prefix_cache = caching
    return server
