"""Check ``vllm serve`` arguments with vLLM's own parser, without starting vLLM.

The launcher's promise is that ``--dry-run`` shows a command vLLM will accept. The
only faithful judge is vLLM's parser itself, built the way ``vllm serve`` builds it:
a :class:`FlexibleArgumentParser` whose ``serve`` sub-command comes from vLLM's
``ServeSubcommand`` (which applies vLLM's ``make_arg_parser``), followed by the
sub-command's quick ``validate`` step. Importing vLLM's CLI can take a while, so the
parser is built once per process.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
from collections.abc import Iterator, Sequence
from typing import Any


class ArgsRejected(ValueError):
    """vLLM's parser refused the arguments; the message is vLLM's own."""


@contextlib.contextmanager
def _parser_environment() -> Iterator[None]:
    """Let vLLM build its parser on a machine without a GPU, for this block only.

    vLLM picks its platform while importing its CLI; with no GPU and no
    ``VLLM_TARGET_DEVICE`` it cannot. ``cpu`` is set only when the variable is unset
    and no CUDA device is visible, and is removed again afterwards.
    """
    if "VLLM_TARGET_DEVICE" in os.environ or _cuda_visible():
        yield
        return
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    try:
        yield
    finally:
        os.environ.pop("VLLM_TARGET_DEVICE", None)


def _cuda_visible() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@functools.cache
def _serve_parser() -> tuple[Any, Any]:
    with _parser_environment():
        from vllm.entrypoints.cli.serve import ServeSubcommand
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        parser = FlexibleArgumentParser(prog="vllm")
        subparsers = parser.add_subparsers(dest="subparser")
        command = ServeSubcommand()
        command.subparser_init(subparsers)
    return parser, command


def check_serve_args(argv: Sequence[str]) -> Any:
    """Parse ``vllm serve <argv>`` as vLLM 0.33.0 would; return the namespace.

    Raises :class:`ArgsRejected` with vLLM's error text for an unknown flag, a bad
    value, or a combination its quick validation refuses.
    """
    parser, command = _serve_parser()
    errors = io.StringIO()
    with _parser_environment():
        try:
            with contextlib.redirect_stderr(errors):
                namespace = parser.parse_args(["serve", *argv])
            command.validate(namespace)
        except SystemExit as exc:
            message = errors.getvalue().strip() or f"vLLM's parser exited with {exc.code}"
            raise ArgsRejected(message) from None
        except (TypeError, ValueError) as exc:
            raise ArgsRejected(f"vllm serve: {exc}") from None
    return namespace
