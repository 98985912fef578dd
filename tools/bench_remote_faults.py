"""What a broken shared cache costs a real run: ``nox`` with a healthy, a dead and a
drip-feeding remote, each from an empty local cache, timed side by side.

The remote must never fail or stall a build: a dead server is switched off at its first
refused connection, and a server that drips its answers is cut at each request's
deadline until the run's budget (3 failures, or 30 s) switches it off. This measures
what that costs on the repository's own sessions.

    python3 tools/bench_remote_faults.py --sessions lint build --json faults.json

Run it from a checkout whose venvs exist (a ``nox`` run before), so that the times are
the targets' own and not installs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools" / "tests"))

from hostile_server import HostileServer, drip_body  # noqa: E402


def _dead_url() -> str:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/cache"


def _run(sessions: list[str], remote: str | None) -> tuple[float, int, str]:
    with tempfile.TemporaryDirectory(prefix="dsv4-faults-") as cache:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_")}
        env.update(CI="true", DSV4_CACHE_DIR=cache, DSV4_CACHE="on")
        if remote:
            env["DSV4_REMOTE_CACHE"] = remote
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "nox", "-s", *sessions], cwd=ROOT,
                              env=env, capture_output=True, text=True)
        return time.monotonic() - started, done.returncode, done.stdout + done.stderr


def main(argv: list[str] | None = None) -> int:
    """Time the sessions against each remote; print a table, optionally write JSON.

    >>> main(["--sessions", "lint", "build"])
    remote     wall s   added s   rc   warnings
    none         21.4       0.0    0          0
    …
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", nargs="+", default=["lint", "build"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    sys.stderr.write("warm-up run (venvs synced, not timed)\n")
    _run(args.sessions, None)
    with HostileServer() as drip:
        drip.on("/cache/*", drip_body(interval=1.0, count=600))  # ten minutes a body
        for name, url in (("none", None), ("dead", _dead_url()), ("drip", drip.url + "/cache")):
            sys.stderr.write(f"running {' '.join(args.sessions)} with remote: {name}\n")
            wall, code, text = _run(args.sessions, url)
            rows.append({"remote": name, "wall_s": round(wall, 1), "rc": code,
                         "warnings": text.count("warning: remote cache")})
    base = rows[0]["wall_s"]
    print(f"{'remote':8s} {'wall s':>8s} {'added s':>9s} {'rc':>4s} {'warnings':>10s}")
    for row in rows:
        row["added_s"] = round(row["wall_s"] - base, 1)
        print(f"{row['remote']:8s} {row['wall_s']:8.1f} {row['added_s']:9.1f} {row['rc']:4d} "
              f"{row['warnings']:10d}")
    if args.json:
        args.json.write_text(json.dumps({"sessions": args.sessions, "runs": rows}, indent=2))
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
