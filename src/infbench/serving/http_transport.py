"""The openai client's HTTP transport: one aiohttp session, set up as vLLM's benchmark client sets
up its own (vllm/benchmarks/serve.py: no connection limit beyond the level's, keep-alive, DNS
cached, proxies from the environment), under the openai client; the request's time limit is
the caller's (`client.stream_request` holds each whole request to it).
The environment's proxy is looked up once a host, not on every request as aiohttp's
`trust_env` does (two thread hops a request, for the proxy and for ~/.netrc, whose
credentials the openai client's key header would refuse anyway).

The openai client builds each request, adds its headers and key, sends it through this
transport and raises its own errors on a failed status; the stream is then read straight
from aiohttp (`response_chunks`), as vLLM's client reads it, not through the four generator
layers httpx puts between the socket and a line. Those layers, aiohttp re-arming a read timer
on every packet (the SDK's transport sets a read timeout) and the environment looked up on
every request were the client's CPU beyond vLLM's (`scripts/bench_client_cost.py`).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator

import aiohttp
import certifi
import httpx2
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

# The response extension under which a response carries its aiohttp body.
CHUNKS = "infbench.aiohttp_content"
# Headers aiohttp has already acted on: the body it hands over is decoded and whole.
HANDLED = {b"content-encoding", b"transfer-encoding", b"content-length"}


class AiohttpBody(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse):
        self.response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in self.response.content.iter_any():
            yield data

    async def aclose(self) -> None:
        self.response.release()


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Each request through one aiohttp session; the session opens with the first request,
    inside the event loop that sends it."""

    def __init__(self, https: bool = False):
        # An https endpoint is verified against certifi's CA bundle, as the SDK's own transport
        # verifies it (built here, when the client is made, not inside a timed request).
        self.ssl = ssl.create_default_context(cafile=certifi.where()) if https else True
        self.session: aiohttp.ClientSession | None = None
        self.proxies: dict[tuple, tuple] = {}

    def proxy(self, url: httpx2.URL) -> tuple:
        """The environment's proxy and its credentials for this URL's host, looked up once."""
        key = (url.scheme, url.host, url.port)
        if key not in self.proxies:
            try:
                self.proxies[key] = get_env_proxy_for_url(URL(str(url)))
            except LookupError:  # no proxy for this host
                self.proxies[key] = (None, None)
        return self.proxies[key]

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=60, ssl=self.ssl)
            self.session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=None)
            )
        proxy, proxy_auth = self.proxy(request.url)
        try:
            headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "accept-encoding"]
            response = await self.session.request(
                request.method,
                str(request.url),
                # The encodings aiohttp decodes (httpx may offer zstd, which aiohttp may not read).
                headers=[*headers, ("Accept-Encoding", "gzip, deflate")],
                data=request.content or None,
                allow_redirects=False,
                proxy=proxy,
                proxy_auth=proxy_auth,
            )
        except aiohttp.ClientError as error:
            raise httpx2.ConnectError(f"{type(error).__name__}: {error}", request=request) from error
        body = AiohttpBody(response)
        headers = [(k, v) for k, v in response.raw_headers if k.lower() not in HANDLED]
        return httpx2.Response(
            response.status, headers=headers, stream=body, request=request, extensions={CHUNKS: response.content}
        )

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()


def response_chunks(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive, each read whole (no line or size limit)."""
    return response.extensions[CHUNKS].iter_any()
