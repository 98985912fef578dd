"""The one HTTP client of ``dsv4-evals``: every request any subcommand sends goes here.

The harnesses judge one server, so where they send, how long they wait and what they
do with a bad answer must be one rule, not one per subcommand. The rule:

* **Only the server.** A ``ServerClient`` is bound to the root ``--base-url`` names
  (``dsv4_evals.base_url``) and takes request *paths*, never URLs; redirects are not
  followed (a 3xx is the server's answer, reported as such), so no request leaves for
  another host.
* **No proxy unless asked.** ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` (and their
  lower-case forms) are ignored: a proxy left in a shell would otherwise measure the
  proxy, or send a benchmark's prompts somewhere else. ``use_proxy_env=True`` (the
  ``--use-proxy-env`` flag) takes the proxy for the root's scheme from those variables,
  honouring ``NO_PROXY``; nothing else is read from the environment, never ``.netrc``
  credentials.
* **One timeout policy.** ``timeout_s`` bounds each whole request, from sending it to
  the last byte of its body, a stream included; connecting alone is bounded by
  ``CONNECT_TIMEOUT_S`` (or ``timeout_s`` when that is shorter). A request over its
  deadline raises ``TimeoutError`` saying so.
* **No retries** (``RETRIES``). A generation request sent twice is counted twice by
  the server and hides exactly the failure the harness is there to find; a caller
  that must wait for a server (``probe``) polls explicitly, with its own deadline.
* **Bounded answers.** A body (or a stream) larger than ``MAX_BODY_BYTES`` is refused
  with ``BodyTooLarge`` instead of being held in memory, and an error message quotes
  at most ``ERROR_BODY_CHARS`` of a body.
* **Nothing secret echoed.** Messages name the method and path, never the full URL,
  which may carry credentials (``http://user:token@host``).
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

RETRIES = 0  # no request is ever sent twice
CONNECT_TIMEOUT_S = 30.0  # longest wait for a TCP (and TLS) connection
PROBE_TIMEOUT_S = 5.0  # one readiness request (probe)
MAX_BODY_BYTES = 64 * 1024 * 1024  # largest response body or stream read
ERROR_BODY_CHARS = 500  # most of a body quoted in an error message

_LINE_END = re.compile(rb"\r\n|\r|\n")

# What a request can raise besides a reply: transport failures and the deadline.
REQUEST_ERRORS: tuple[type[BaseException], ...] = (httpx.HTTPError, TimeoutError)


class BodyTooLarge(httpx.TransportError):
    """A response body over ``MAX_BODY_BYTES``; it was not read to the end."""


@dataclass(frozen=True)
class Reply:
    """A whole (non-streamed) response: status and body bytes."""

    status: int
    body: bytes

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.body)

    def text(self, limit: int = ERROR_BODY_CHARS) -> str:
        """The start of the body as text, for messages."""
        return self.body.decode("utf-8", "replace")[:limit]


def timeouts(timeout_s: float) -> httpx.Timeout:
    """httpx's per-operation timeouts under the policy: connect capped, the rest ``timeout_s``."""
    return httpx.Timeout(timeout_s, connect=min(CONNECT_TIMEOUT_S, timeout_s))


def env_proxy(root: str) -> str | None:
    """The proxy the environment names for ``root``, or None (none set, or NO_PROXY)."""
    parts = urlsplit(root)
    proxies = urllib.request.getproxies_environment()
    if urllib.request.proxy_bypass_environment(parts.netloc.rpartition("@")[2], proxies):
        return None
    return proxies.get(parts.scheme) or proxies.get("all")


def _check_path(path: str) -> str:
    if not path.startswith("/") or path.startswith("//") or "://" in path:
        raise ValueError(f"request path {path!r}: a path under the server root, not a URL")
    return path


class Stream:
    """An open streaming response: its status, then its lines or its (bounded) body."""

    def __init__(self, response: httpx.Response, chunks: AsyncIterator[bytes]) -> None:
        self.status = response.status_code
        self._chunks = chunks

    async def lines(self) -> AsyncIterator[str]:
        """Each line as soon as it has arrived; ``\\n``, ``\\r\\n`` and ``\\r`` end one.

        A ``\\r\\n`` split across two reads yields one extra empty line, which server-sent
        events treat as the separator it already is."""
        pending = b""
        async for chunk in self._chunks:
            *complete, pending = _LINE_END.split(pending + chunk)
            for raw in complete:
                yield raw.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")

    async def read(self) -> Reply:
        """The rest of the body."""
        return Reply(self.status, b"".join([c async for c in self._chunks]))


class ServerClient:
    """Requests to one server root under the module's policy; ``async with`` it."""

    def __init__(
        self,
        root: str,
        *,
        timeout_s: float,
        connections: int = 1,
        use_proxy_env: bool = False,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.root = root
        self.timeout_s = timeout_s
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self.proxy = env_proxy(root) if use_proxy_env else None
        self._client = httpx.AsyncClient(
            base_url=root,
            timeout=timeouts(timeout_s),
            follow_redirects=False,
            # No proxy, .netrc or certificate settings from the environment; the proxy,
            # when asked for, is the one exception, and it is given explicitly here.
            trust_env=False,
            transport=httpx.AsyncHTTPTransport(retries=RETRIES, limits=limits, proxy=self.proxy),
        )

    async def __aenter__(self) -> ServerClient:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.__aexit__(*exc)

    async def request(self, method: str, path: str, **options: Any) -> Reply:
        """Send one request and read its whole body, within ``timeout_s``.

        ``options`` are those of ``stream`` (``json``, ``headers``)."""
        async with self.stream(method, path, **options) as stream:
            return await stream.read()

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncIterator[Stream]:
        """Send one request; the body is read through the ``Stream``, within ``timeout_s``."""
        request = self._client.build_request(
            method, _check_path(path), json=json, headers=dict(headers or {})
        )
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._client.send(request, stream=True)
        except TimeoutError:
            raise self._late() from None
        chunks = self._chunks(response, deadline, method, path)
        try:
            yield Stream(response, chunks)
        finally:
            await chunks.aclose()
            await response.aclose()

    async def _chunks(
        self, response: httpx.Response, deadline: float, method: str, path: str
    ) -> AsyncGenerator[bytes, None]:
        source = response.aiter_bytes().__aiter__()
        size = 0
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await anext(source)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise self._late() from None
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise BodyTooLarge(f"{method} {path}: response body over {MAX_BODY_BYTES} bytes")
            yield chunk

    def _late(self) -> TimeoutError:
        return TimeoutError(f"no complete response within {self.timeout_s:g} s")


def probe(
    root: str,
    paths: Sequence[str],
    *,
    use_proxy_env: bool = False,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> bool:
    """Whether one of ``paths`` answers 200 now (one GET each, in order, no retries)."""

    async def ask() -> bool:
        async with ServerClient(root, timeout_s=timeout_s, use_proxy_env=use_proxy_env) as client:
            for path in paths:
                try:
                    if (await client.request("GET", path)).status == 200:
                        return True
                except REQUEST_ERRORS:
                    continue
        return False

    return asyncio.run(ask())
