"""Start a server for one envelope with ``dsv4-serve``, wait until it answers, stop it.

The launcher is the one the serve table feeds: ``dsv4-serve --gpu G --tp T --context
C --seqs S -- <model args>`` turns the envelope into the exact ``vllm serve`` command
it was measured with. The ladder starts it in its own process group, sends its output
to a log file (which ``dsv4-evals logs`` can then check), polls ``/health`` and
``/v1/models`` until one answers 200, and on exit stops the whole group: SIGTERM,
then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from dsv4_evals.base_url import api_path
from dsv4_evals.http import probe

READY_PATHS = ("/health", api_path("models"))
READY_POLL_S = 0.25


class LaunchError(RuntimeError):
    """The server did not come up; the message carries the end of its log."""


def serve_command(
    launcher: Sequence[str], gpu: str, tp: int, context: int, seqs: int, model_args: Sequence[str]
) -> list[str]:
    """The full argv for one envelope."""
    return [
        *launcher,
        "--gpu", gpu,
        "--tp", str(tp),
        "--context", str(context),
        "--seqs", str(seqs),
        "--",
        *model_args,
    ]


class LaunchedServer:
    """A server subprocess for the duration of a ``with`` block."""

    def __init__(
        self,
        argv: Sequence[str],
        base_url: str,
        log_path: Path,
        ready_timeout_s: float,
        stop_grace_s: float = 30.0,
        env: Mapping[str, str] | None = None,
        use_proxy_env: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env or {})  # added to this process's environment for the server
        self.base_url = base_url.rstrip("/")
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.stop_grace_s = stop_grace_s
        self.use_proxy_env = use_proxy_env
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LaunchedServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            try:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **self.env} if self.env else None,
                    start_new_session=True,  # own process group: stop() reaches workers
                )
            except OSError as exc:
                raise LaunchError(
                    f"cannot start {self.argv[0]!r}: {exc.strerror}; is dsv4-serve installed "
                    "(pip install ./packages/vllm_integration) or --serve-command set?"
                ) from exc

    def wait_ready(self, poll_s: float = READY_POLL_S) -> None:
        """Poll until a readiness path answers 200, the server exits, or the deadline."""
        assert self.proc is not None
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            code = self.proc.poll()
            if code is not None:
                raise LaunchError(
                    f"server exited with status {code} before answering; "
                    f"end of {self.log_path}:\n{self.log_tail()}"
                )
            if probe(self.base_url, READY_PATHS, use_proxy_env=self.use_proxy_env):
                return
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"server did not answer {' or '.join(READY_PATHS)} at {self.base_url} "
                    f"within {self.ready_timeout_s:.0f} s (--launch-timeout); "
                    f"end of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(poll_s)

    def stop(self) -> int | None:
        """Stop the server's process group; returns its exit status.

        The whole group is signalled even when the launcher itself has already exited:
        engine and worker processes it left behind would otherwise keep the GPUs.
        """
        proc = self.proc
        if proc is None:
            return None
        self._signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=self.stop_grace_s)
        self._signal(signal.SIGKILL)  # whatever of the group is still there
        proc.wait()
        return proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text("utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)  # the group this object created
