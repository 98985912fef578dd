"""The one ``--base-url`` rule: every spelling of a server means the same server.

The unit tests draw hosts, ports and proxy prefixes at random and check that the four
spellings (root, ``/v1``, each with trailing slashes) reduce to one root, and that
endpoint URLs and malformed ones are refused with a message naming the flag. The
command tests run ``stress``, ``ladder`` and ``lm-eval`` with each spelling against
the scripted servers, which answer only on the real paths (a doubled ``/v1/v1``
would be a 404), and check that each report states the URL it used.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
from pathlib import Path

import dsv4_evals.ladder as ladder
import pytest
from _http_scripted_server import ScriptedServer as ChatServer
from dsv4_evals import lm_eval, stress
from dsv4_evals.base_url import BaseURLError, normalize_base_url
from hypothesis import given
from hypothesis import strategies as st
from test_ladder import env
from test_ladder_server import ScriptedServer as StreamServer

PAYLOAD = Path(__file__).parent / "data" / "stress" / "payload.json"
# Path segments a proxy prefix cannot end in: they are the API prefix and endpoints.
RESERVED = {"v1", "completions", "models", "tokenize", "health"}

hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z][a-z0-9-]{0,8}){0,2}", fullmatch=True),
    st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t))),
)
prefixes = st.lists(st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True), max_size=2).map(
    lambda parts: "".join("/" + p for p in parts if p not in RESERVED)
)


def spellings(root: str) -> list[str]:
    return [root, root + "/", root + "/v1", root + "/v1/", root + "/v1//"]


@given(
    scheme=st.sampled_from(["http", "https"]),
    host=hosts,
    port=st.one_of(st.none(), st.integers(1, 65535)),
    prefix=prefixes,
)
def test_every_spelling_reduces_to_the_root(scheme, host, port, prefix) -> None:
    root = f"{scheme}://{host}{'' if port is None else f':{port}'}{prefix}"
    for text in spellings(root):
        url = normalize_base_url(text)
        assert url.root == root, text
        assert url.api == root + "/v1"
        assert url.api_url("chat/completions") == root + "/v1/chat/completions"
        assert url.api_url("/models") == root + "/v1/models"
        assert url.url("/tokenize") == root + "/tokenize"
        assert url.given == text


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("127.0.0.1:8000", "http(s) URL with a host"),
        ("ftp://h/v1", "http(s) URL with a host"),
        ("http:///v1", "http(s) URL with a host"),
        ("", "empty"),
        ("http://h:99999/v1", "not a usable URL"),
        ("http://h:80/v1?x=1", "no query or fragment"),
        ("http://h:80/v1#top", "no query or fragment"),
        ("http://h:80/v1/chat/completions", "pass the server root http://h:80"),
        ("http://h:80/v1/completions/", "pass the server root http://h:80"),
        ("http://h/proxy/v1/models", "pass the server root http://h/proxy"),
        ("http://h:80/tokenize", "pass the server root http://h:80"),
    ],
)
def test_unusable_urls_are_refused_with_the_flag_named(text: str, needle: str) -> None:
    with pytest.raises(BaseURLError) as info:
        normalize_base_url(text)
    assert "--base-url" in str(info.value) and needle in str(info.value)


def _parser(module) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dsv4-evals")
    module.register(parser.add_subparsers(dest="command", required=True))
    return parser


def _run(module, argv: list[str]) -> int:
    ns = _parser(module).parse_args(argv)
    return int(ns.func(ns))


def test_stress_sends_to_one_path_and_reports_the_url(tmp_path: Path) -> None:
    with ChatServer(lambda i: "text") as server:
        root = server.base_url.removesuffix("/v1")
        for n, text in enumerate(spellings(root)):
            out = tmp_path / f"run{n}"
            code = _run(stress, ["stress", "--base-url", text, "--payload", str(PAYLOAD),
                                 "--concurrency", "2", "--warmup-waves", "0", "--waves", "1",
                                 "--out", str(out)])
            assert code == 0, (out / "report.md").read_text()
            identity = json.loads((out / "run.json").read_text())
            assert identity["base_url"] == root
            assert identity["url"] == root + "/v1/chat/completions"
            md = (out / "report.md").read_text()
            assert f"- Server: {root} (requests to {root}/v1/chat/completions)" in md
        assert set(server.paths) == {"/v1/chat/completions"}
        assert len(server.paths) == 2 * len(spellings(root))


def test_stress_refuses_an_endpoint_url_before_sending(tmp_path: Path, capsys) -> None:
    with ChatServer(lambda i: "text") as server:
        code = _run(stress, ["stress", "--base-url", server.base_url + "/chat/completions",
                             "--payload", str(PAYLOAD), "--out", str(tmp_path / "o")])
        assert code == 2
        assert "names the endpoint '/chat/completions'" in capsys.readouterr().err
        assert server.paths == []
    assert not (tmp_path / "o").exists()


def test_ladder_measures_with_every_spelling(monkeypatch, capsys) -> None:
    monkeypatch.setattr(ladder, "ENVELOPE_SOURCE", lambda: [env(1, None, id_="control")])
    with StreamServer(ttft_s=0.01, period_s=0.002) as server:
        root = server.base_url
        for text in spellings(root):
            code = _run(ladder, ["ladder", "--base-url", text, "--max-tokens", "12",
                                 "--warmup", "0", "--json", "--no-progress"])
            doc = json.loads(capsys.readouterr().out)
            assert code == 0, doc
            assert doc["base_url"] == root and doc["api_url"] == root + "/v1"
            (result,) = doc["results"]
            assert result["verdict"] == "measured" and result["aggregate_tok_s"] > 0
            assert result["prompt"]["ratio_source"] == "measured"  # /tokenize beside /v1
        code = _run(ladder, ["ladder", "--base-url", root + "/v1/models", "--no-progress"])
        assert code == 2
        assert "names the endpoint '/models'" in capsys.readouterr().err


def test_lm_eval_gets_one_completions_url_and_says_so(tmp_path: Path, capsys) -> None:
    rng = random.Random(14)
    root = f"http://10.{rng.randrange(256)}.{rng.randrange(256)}.7:{rng.randrange(1024, 65536)}"
    for text in spellings(root):
        assert _run(lm_eval, ["lm-eval", "--base-url", text, "--model", "m", "--output-path",
                              str(tmp_path), "--task", "gsm8k:5", "--dry-run"]) == 0
        captured = capsys.readouterr()
        argv = shlex.split(captured.out.strip())
        model_args = argv[argv.index("--model_args") + 1]
        assert f"base_url={root}/v1/completions," in model_args
        assert f"server {root}; lm-eval sends to {root}/v1/completions" in captured.err
