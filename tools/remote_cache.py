"""A client for Bazel's HTTP remote cache protocol, as bazel-remote and nginx+DAV serve it.

- ``GET``/``PUT <url>/ac/<sha256>``: the action cache, here one result record (JSON);
- ``GET``/``PUT <url>/cas/<sha256>``: content-addressed blobs, named by their sha256.

Three rules make a shared cache safe to lean on:

- **It never fails the build.** An unreachable server, a request slower than the
  timeout or a 5xx answer gives one warning line; after that the remote is left alone
  for the rest of the run, and targets run locally.
- **It never gives a false pass.** Every downloaded blob is checked against its
  sha256; the caller treats a record with a missing or corrupt blob as a miss.
- **Secrets stay secret.** The token goes out as a bearer ``Authorization`` header and
  nowhere else: URLs are printed without credentials, and the token is never part of a
  key, a record, a message or a file.

Stdlib only (urllib): it runs before any environment exists.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

TIMEOUT_S = 5.0


class RemoteUnavailable(Exception):
    """The server could not be used (network, timeout, 5xx): warn once and go local."""


def redact(url: str) -> str:
    """The URL with any user:password removed, fit to print."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


class RemoteCache:
    """One remote cache endpoint. ``warn`` receives the single warning line."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        upload: bool,
        warn: Callable[[str], None],
        timeout: float = TIMEOUT_S,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"DSV4_REMOTE_CACHE={redact(url)!r} is not an http(s) URL; expected e.g. "
                "http://cache.example:8080/dsv4"
            )
        self.url = url.rstrip("/")
        self.shown = redact(self.url)
        self.upload = upload
        self._token = token or None
        self._warn = warn
        self._timeout = timeout
        self.disabled = False

    # ------------------------------------------------------------------ transport
    def _request(self, method: str, path: str, body: bytes | None = None) -> bytes | None:
        """Body of a 2xx answer; None for 404; RemoteUnavailable for the rest."""
        if self.disabled:
            raise RemoteUnavailable("disabled after an earlier failure")
        request = urllib.request.Request(f"{self.url}/{path}", data=body, method=method)
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        if body is not None:
            request.add_header("Content-Type", "application/octet-stream")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:
                return answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and method == "GET":
                return None
            self._fail(f"{method} {self.shown}/{path} answered HTTP {exc.code}")
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            self._fail(f"{method} {self.shown}/{path} failed: {reason}")
        raise AssertionError("unreachable")  # _fail always raises

    def _fail(self, what: str) -> None:
        self.disabled = True
        self._warn(
            f"warning: remote cache {self.shown} unusable ({what}); "
            "running locally and not asking it again in this run"
        )
        raise RemoteUnavailable(what)

    # ------------------------------------------------------------------ protocol
    def get_record(self, key: str) -> bytes | None:
        try:
            return self._request("GET", f"ac/{key}")
        except RemoteUnavailable:
            return None

    def get_blob(self, sha256: str) -> bytes | None:
        """The blob, or None when absent, unreachable or not matching its name."""
        try:
            data = self._request("GET", f"cas/{sha256}")
        except RemoteUnavailable:
            return None
        if data is None or hashlib.sha256(data).hexdigest() != sha256:
            return None
        return data

    def put(self, kind: str, name: str, data: bytes) -> bool:
        """Upload one entry (``kind`` is 'ac' or 'cas'); False when it did not go."""
        if not self.upload:
            return False
        try:
            self._request("PUT", f"{kind}/{name}", data)
        except RemoteUnavailable:
            return False
        return True
