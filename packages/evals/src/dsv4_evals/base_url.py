"""The one ``--base-url`` rule of every ``dsv4-evals`` subcommand.

Users copy a server address from wherever they saw it: vLLM prints the root
(``http://127.0.0.1:8000``), OpenAI clients want the ``/v1`` form, and either may
carry a trailing slash. Every subcommand accepts all four spellings and means the same
server by them. They are reduced here, once, to the server *root* (scheme, host, port
and any path prefix of a reverse proxy, without ``/v1`` and without a trailing slash);
each request path is then built from the root: ``/v1/chat/completions``,
``/v1/completions``, ``/v1/models`` for the OpenAI API, ``/tokenize`` and ``/health``
for vLLM's own endpoints, which live beside ``/v1`` rather than under it.

A URL that names an endpoint (``.../v1/chat/completions``) is refused with the root
to use instead, so a mistyped address fails before any request is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

API_PREFIX = "/v1"
# The flag's help text, the same in every subcommand.
HELP = (
    "the server: its root or its /v1 form, trailing slash optional "
    "(http://127.0.0.1:8000, http://127.0.0.1:8000/v1/ and the rest are one server)"
)
# Endpoint paths people paste by mistake; none of them is a server root.
_ENDPOINT_SUFFIXES = ("/chat/completions", "/completions", "/models", "/tokenize", "/health")


def api_path(endpoint: str) -> str:
    """``/v1/<endpoint>``: the path of an OpenAI endpoint under any server root."""
    return f"{API_PREFIX}/{endpoint.lstrip('/')}"


class BaseURLError(ValueError):
    """A ``--base-url`` that no rule maps to a server root; the message says why."""


@dataclass(frozen=True)
class ServerURL:
    """A normalized server address: ``root`` plus the path builders."""

    root: str  # e.g. http://127.0.0.1:8000, or http://gateway/dsv4 behind a proxy
    given: str  # the text the user passed, for messages

    @property
    def api(self) -> str:
        """The OpenAI API base: ``<root>/v1``."""
        return self.root + API_PREFIX

    def api_url(self, endpoint: str) -> str:
        """``<root>/v1/<endpoint>``, e.g. ``api_url("chat/completions")``."""
        return self.root + api_path(endpoint)

    def url(self, path: str) -> str:
        """``<root>/<path>`` for endpoints beside ``/v1`` (``/tokenize``, ``/health``)."""
        return f"{self.root}/{path.lstrip('/')}"


def normalize_base_url(text: str, flag: str = "--base-url") -> ServerURL:
    """Reduce any accepted spelling of a server address to its root.

    Accepted: ``http(s)://host[:port][/prefix]`` optionally followed by ``/v1``, each
    with or without trailing slashes. Refused (``BaseURLError``): no http(s) scheme or
    no host, a query or fragment, or a path ending in an API endpoint.
    """
    if not isinstance(text, str) or not text.strip():
        raise BaseURLError(f"{flag}: empty; expected a server URL such as http://127.0.0.1:8000")
    raw = text.strip()
    try:
        parts = urlsplit(raw)
        port = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError as exc:
        raise BaseURLError(f"{flag} {text!r}: not a usable URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BaseURLError(
            f"{flag} {text!r}: expected an http(s) URL with a host, such as "
            "http://127.0.0.1:8000 or http://127.0.0.1:8000/v1 (both mean the same server)"
        )
    if parts.query or parts.fragment:
        raise BaseURLError(f"{flag} {text!r}: a server URL has no query or fragment")
    path = parts.path.rstrip("/")
    for suffix in _ENDPOINT_SUFFIXES:
        if path.endswith(suffix):
            root_path = path[: -len(suffix)]
            if root_path.endswith(API_PREFIX):
                root_path = root_path[: -len(API_PREFIX)]
            hint = _join(parts.scheme, parts.netloc, root_path)
            raise BaseURLError(
                f"{flag} {text!r} names the endpoint {suffix!r}, not a server; "
                f"pass the server root {hint} (or {hint}{API_PREFIX})"
            )
    if path.endswith(API_PREFIX):
        path = path[: -len(API_PREFIX)].rstrip("/")
    del port
    return ServerURL(root=_join(parts.scheme, parts.netloc, path), given=text)


def _join(scheme: str, netloc: str, path: str) -> str:
    return f"{scheme}://{netloc}{path}"
