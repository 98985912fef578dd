"""Time the result cache the way users meet it: reruns, a one-file change, a fresh clone.

    python3 tools/bench_cache.py --remote http://127.0.0.1:8080/dsv4 [--json]

Needs a running Bazel-protocol cache at ``--remote`` (``.ci/run`` shows how to start
WsgiDAV on loopback). It works on a scratch clone of this repository's ``HEAD`` and
leaves the checkout alone:

1. ``nox`` with an empty local cache, uploading every pass (the cold run);
2. ``nox`` again, nothing changed (every target replays from the local cache);
3. one file of ``packages/evals`` changed, ``nox`` (only what depends on it reruns);
4. a second clone with an empty local cache, ``nox`` against the warm remote.

This is a measurement, not a test: it prints wall times, which targets ran, and how
long their own runs took, so the cost of the cache itself can be read off.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAN = re.compile(r"nox > (\S+): PASSED in ([\d.]+) s, stored as")
HIT = re.compile(r"nox > (\S+): cached PASSED \(key \w+, (\w+),")


def _nox(repo: Path, env: dict[str, str], log: Path) -> dict[str, object]:
    started = time.monotonic()
    with log.open("w") as handle:
        code = subprocess.run([sys.executable, "-m", "nox"], cwd=repo, env=env, stdout=handle,
                              stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - started
    text = log.read_text()
    if code != 0:
        raise SystemExit(f"nox failed in {repo} (exit {code}); see {log}")
    ran = {name: float(seconds) for name, seconds in RAN.findall(text)}
    hits = {name: origin for name, origin in HIT.findall(text)}
    return {"wall_s": round(wall, 1), "ran": ran, "hits": hits,
            "own_run_s": round(sum(ran.values()), 1),
            "overhead_s": round(wall - sum(ran.values()), 1)}


def main() -> int:
    """Run the four steps on scratch clones and print their wall times.

    A measurement, kept as a script rather than a test so that the cache's own cost
    (wall time less the targets' own run time) can be read off on a real machine.
    The clones share nothing but the remote; the checkout is never touched.

    Example (times vary by machine)::

        $ python3 tools/bench_cache.py --remote http://127.0.0.1:8080/dsv4
        step                        wall s  targets run  their own s  rest s  ran
        cold                         412.6           12        371.9    40.7  evals, …
        rerun                          6.1            0          0.0     6.1  -
        evals_change                  71.4            2         62.0     9.4  evals, evals-server
        fresh_clone_warm_remote       58.3            0          0.0    58.3  -
        logs: /tmp/dsv4-cache-bench-…
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--remote", required=True, help="Bazel-protocol cache URL to use")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a new temp dir)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="dsv4-cache-bench-"))
    clone_a, clone_b = work / "a", work / "b"
    for clone in (clone_a, clone_b):
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_")}
    base.update(CI=os.environ.get("CI", "true"), DSV4_REMOTE_CACHE=args.remote)
    env_a = {**base, "DSV4_CACHE_DIR": str(work / "cache-a"), "DSV4_REMOTE_CACHE_UPLOAD": "1"}
    env_b = {**base, "DSV4_CACHE_DIR": str(work / "cache-b")}

    steps: dict[str, dict[str, object]] = {}
    steps["cold"] = _nox(clone_a, env_a, work / "cold.log")
    steps["rerun"] = _nox(clone_a, env_a, work / "rerun.log")
    changed = clone_a / "packages" / "evals" / "src" / "dsv4_evals" / "__init__.py"
    changed.write_text(changed.read_text() + "\n# a one-line change\n")
    steps["evals_change"] = _nox(clone_a, env_a, work / "evals-change.log")
    steps["fresh_clone_warm_remote"] = _nox(clone_b, env_b, work / "fresh-clone.log")

    if args.json:
        print(json.dumps({"work": str(work), "steps": steps}, indent=2))
        return 0
    print(f"{'step':<26}{'wall s':>8}{'targets run':>13}{'their own s':>13}{'rest s':>8}  ran")
    for name, step in steps.items():
        print(f"{name:<26}{step['wall_s']:>8}{len(step['ran']):>13}{step['own_run_s']:>13}"
              f"{step['overhead_s']:>8}  {', '.join(step['ran']) or '-'}")
    print(f"logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
