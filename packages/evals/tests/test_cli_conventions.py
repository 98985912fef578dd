"""One command-line style for every subcommand (``dsv4_evals.args``).

Bad values are refused while parsing (argparse ``type=`` validators, exit 2, nothing
sent or written), each validator is one function shared by every flag of its kind,
and a problem found later is reported by the one helper, ``dsv4-evals CMD: error: ...``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import dsv4_evals.args as args
import pytest
from dsv4_evals.cli import build_parser, main
from hypothesis import given
from hypothesis import strategies as st

PAYLOAD = Path(__file__).parent / "data" / "stress" / "payload.json"
TRACE = Path(__file__).parent / "data" / "traces" / "decode_small.json"


def _actions(command: str) -> dict[str, argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {opt: act for act in sub.choices[command]._actions for opt in act.option_strings}


# Every flag of a kind uses the one validator of that kind, in every subcommand.
VALIDATED = {
    ("stress", "--concurrency"): args.positive_int,
    ("stress", "--warmup-waves"): args.non_negative_int,
    ("stress", "--waves"): args.positive_int,
    ("stress", "--max-tokens"): args.positive_int,
    ("stress", "--max-model-len"): args.positive_int,
    ("stress", "--timeout"): args.positive_float,
    ("ladder", "--max-tokens"): args.positive_int,
    ("ladder", "--prompt-tokens"): args.positive_int,
    ("ladder", "--warmup"): args.non_negative_int,
    ("ladder", "--launch-timeout"): args.positive_float,
    ("ladder", "--request-timeout"): args.positive_float,
    ("ladder", "--prompt-fraction"): args.fraction,
    ("ladder", "--tolerance"): args.tolerance,
    ("matrix", "--max-tokens"): args.positive_int,
    ("matrix", "--launch-timeout"): args.positive_float,
    ("buckets", "--graph-launches"): args.positive_int,
    ("buckets", "--top"): args.non_negative_int,
    ("lm-eval", "--limit"): args.positive_int,
    ("ab", "--alpha"): args.probability,
    ("ab", "--margin"): args.non_negative_float,
    ("ab", "--bootstrap-iters"): args.positive_int,
}


@pytest.mark.parametrize(("command", "flag"), list(VALIDATED))
def test_each_flag_uses_the_shared_validator(command, flag):
    assert _actions(command)[flag].type is VALIDATED[(command, flag)]


@pytest.mark.parametrize("command", ["stress", "ladder", "matrix"])
def test_every_server_subcommand_offers_use_proxy_env(command):
    action = _actions(command)["--use-proxy-env"]
    assert action.default is False and action.help == args.PROXY_HELP


BAD_VALUES = [
    (["stress", "--base-url", "http://127.0.0.1:1", "--payload", str(PAYLOAD),
      "--concurrency", "0"], "argument --concurrency: expected a positive integer, got 0"),
    (["stress", "--base-url", "http://127.0.0.1:1", "--payload", str(PAYLOAD),
      "--warmup-waves", "-1"], "argument --warmup-waves: expected an integer >= 0, got -1"),
    (["stress", "--base-url", "http://127.0.0.1:1", "--payload", str(PAYLOAD),
      "--timeout", "0"], "argument --timeout: expected a positive number, got 0"),
    (["stress", "--base-url", "http://127.0.0.1:1", "--payload", str(PAYLOAD),
      "--max-model-len", "x"], "argument --max-model-len: expected an integer, got 'x'"),
    (["ladder", "--tolerance", "1"], "argument --tolerance: expected a number in [0, 1), got 1"),
    (["ladder", "--prompt-fraction", "0"],
     "argument --prompt-fraction: expected a number in (0, 1], got 0"),
    (["matrix", "--repeats", "2"], "argument --repeats: at least 3 runs per variant are "
     "needed to see the run-to-run spread, got 2"),
    (["matrix", "--launch-timeout", "-5"],
     "argument --launch-timeout: expected a positive number, got -5"),
    (["buckets", str(TRACE), "--top", "-1"], "argument --top: expected an integer >= 0, got -1"),
    (["lm-eval", "--base-url", "http://h", "--model", "m", "--output-path", "o",
      "--limit", "0"], "argument --limit: expected a positive integer, got 0"),
    (["ab", "--base", "b", "--candidate", "c", "--margin", "-0.1"],
     "argument --margin: expected a number >= 0, got -0.1"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_VALUES)
def test_bad_values_are_refused_while_parsing(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"dsv4-evals {argv[0]}: error: {message}" in err
    assert list(tmp_path.iterdir()) == []  # nothing written (stress-out, o, ...)


LATE_ERRORS = [
    (["stress", "--base-url", "http://h/v1/models", "--payload", str(PAYLOAD)],
     "--base-url 'http://h/v1/models' names the endpoint '/models'"),
    (["ladder", "--", "model"], "arguments ['model'] are for --launch only"),
    (["matrix", "--server", "nope"], "--server 'nope': expected NAME=URL"),
    (["logs", "absent.log"], "cannot read server log absent.log"),
    (["buckets", "absent.json"], "cannot read trace"),
    (["ab", "--base", "absent", "--candidate", "absent"], "absent"),
    (["lm-eval", "--base-url", "h:1", "--model", "m", "--output-path", "o"],
     "--base-url 'h:1': expected an http(s) URL"),
]


@pytest.mark.parametrize(("argv", "message"), LATE_ERRORS)
def test_later_usage_errors_share_one_format(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    (line, *_) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"dsv4-evals {argv[0]}: error: ") and message in line


def test_usage_error_and_warning_write_one_line(capsys):
    assert args.usage_error("x", "bad thing") == args.EXIT_USAGE == 2
    args.warning("x", "odd thing")
    err = capsys.readouterr().err
    assert err == "dsv4-evals x: error: bad thing\ndsv4-evals x: warning: odd thing\n"


@given(st.integers(-10**6, 10**6))
def test_integer_validators_agree_with_their_bounds(n):
    text = str(n)
    for fn, ok in ((args.positive_int, n >= 1), (args.non_negative_int, n >= 0),
                   (args.int_at_least(5, "things"), n >= 5)):
        if ok:
            assert fn(text) == n
        else:
            with pytest.raises(argparse.ArgumentTypeError):
                fn(text)


@given(st.floats(-2.0, 2.0, allow_nan=False))
def test_number_validators_agree_with_their_bounds(x):
    text = repr(x)
    for fn, ok in ((args.positive_float, x > 0), (args.non_negative_float, x >= 0),
                   (args.fraction, 0 < x <= 1), (args.tolerance, 0 <= x < 1),
                   (args.probability, 0 < x < 1)):
        if ok:
            assert fn(text) == x
        else:
            with pytest.raises(argparse.ArgumentTypeError):
                fn(text)


@pytest.mark.parametrize("fn", [args.positive_int, args.positive_float, args.fraction])
def test_non_numbers_are_named(fn):
    with pytest.raises(argparse.ArgumentTypeError, match="got 'ten'"):
        fn("ten")
