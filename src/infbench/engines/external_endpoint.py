"""An OpenAI-compatible endpoint the user already runs (`server.external`): measured with the
same client, levels and checks as the server this pipeline starts, and started or stopped by
nothing here. Its API key is read from the environment variable the config names and kept in
memory only: never in an artifact, a log line or the report."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

import httpx

from infbench.core.errors import UserError
from infbench.engines.servers import ServerSpec, start_server


class EndpointError(UserError):
    """The endpoint cannot be measured; the message names what to fix in server.external."""


class ExternalEndpoint:
    """The interface of VLLMServer that the measurements use, for a server run elsewhere."""

    startup_s = None
    command = None
    log_path = None
    resets_prefix_cache = False  # not ours to empty

    def __init__(self, base_url: str, model: str, api_key_env: str | None = None, metrics: bool = True,
                 setting: str = "server.external"):  # fmt: skip
        """`setting`: where the config gives it, named in every error."""
        self.setting = setting
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.host = urlparse(self.base_url).hostname
        self.served_name = model
        self.metrics = metrics
        self.api_key = None
        if api_key_env:
            self.api_key = os.environ.get(api_key_env)
            if not self.api_key:
                raise EndpointError(
                    f"{setting}.api_key_env = {api_key_env!r}, but that environment variable is not set "
                    f"or empty; export {api_key_env}=<your key> before running snakemake"
                )

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def check(self) -> None:
        """The endpoint answers /v1/models with this key and serves the configured model."""
        try:
            response = httpx.get(f"{self.base_url}/v1/models", headers=self._headers(), timeout=10)
        except httpx.HTTPError as error:
            raise EndpointError(
                f"cannot reach {self.base_url}/v1/models ({type(error).__name__}: {error}); start the server or "
                f"fix {self.setting}.base_url"
            ) from None
        if response.status_code in (401, 403):
            raise EndpointError(
                f"{self.base_url} refused the request (HTTP {response.status_code}): the key is missing or wrong; "
                f"set {self.setting}.api_key_env to the variable holding the endpoint's key"
            )
        if response.status_code != 200:
            raise EndpointError(
                f"{self.base_url}/v1/models answered HTTP {response.status_code}; is it OpenAI-compatible?"
            )
        served = [entry.get("id") for entry in response.json().get("data", [])]
        if self.served_name not in served:
            raise EndpointError(
                f"{self.base_url} serves {', '.join(map(str, served)) or 'no model'}, not {self.served_name!r}; "
                f"set {self.setting}.model to the served name"
            )

    def alive(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/v1/models", headers=self._headers(), timeout=10).status_code == 200
        except httpx.HTTPError:
            return False

    def log_tail(self, lines: int = 15) -> str:
        return "(an external endpoint: its log is wherever it runs)"

    def description(self) -> dict:
        """What the artifacts record about the endpoint (never the key)."""
        return {"base_url": self.base_url, "model": self.served_name, "metrics": self.metrics}

    def __enter__(self) -> ExternalEndpoint:
        self.check()
        return self

    # As a server launched with others (vllm_server.started_together): nothing to start or stop.
    def launch(self) -> None:
        pass

    def wait_ready(self) -> None:
        self.check()

    def stop(self) -> None:
        pass

    def empties_its_prefix_cache(self) -> bool:
        """Whether it answers vLLM's POST /reset_prefix_cache (a server in dev mode): then it is
        emptied between passes as the servers started here are (this call empties it once)."""
        try:
            return httpx.post(f"{self.base_url}/reset_prefix_cache", headers=self._headers(), timeout=30).is_success
        except httpx.HTTPError:
            return False

    def __exit__(self, *exc) -> None:
        pass


def measured_server(spec: ServerSpec, external: dict | None, log_path: str | Path):
    """The endpoint given in server.external, or a fresh server of `spec` that this stage owns;
    not yet entered."""
    if external:
        return ExternalEndpoint(external["base_url"], external["model"], external["api_key_env"], external["metrics"])
    return start_server(spec, log_path)
