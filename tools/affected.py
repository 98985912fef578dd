"""``nox -s affected -- BASE``: the sessions a change since a git ref needs.

Like Bazel's rdeps: a change to a package affects its own targets and every target
whose environment holds that package. With the result cache a plain ``nox`` already
reruns only what changed; this narrows which runner (CPU or GPU) is asked at all.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import targets as target_graph

FLAGS = {"--run", "--cpu-only", "--gpu-only", "--no-venv"}


def main(session, graph: target_graph.Graph, root: Path) -> None:
    """Print (and with ``--run``, run) the sessions affected since the base ref.

    >>> main(session, graph, ROOT)   # nox -s affected -- origin/main
    policy kernels lint build meta
    """
    args = [a for a in session.posargs if a not in FLAGS]
    given = set(session.posargs) & FLAGS
    base = args[0] if args else "origin/main"
    diff = subprocess.run(["git", "diff", "--name-only", f"{base}...HEAD"], cwd=root,
                          capture_output=True, text=True)
    if diff.returncode != 0:
        session.error(f"git diff against {base!r} failed: {diff.stderr.strip()}")
    changed = [line for line in diff.stdout.splitlines() if line]
    chosen = target_graph.affected_sessions(graph, changed)
    gpu_sessions = {"gpu", "bench", "tune", *(t.name for t in graph.tagged("gpu"))}
    if "--cpu-only" in given:
        chosen = [name for name in chosen if name not in gpu_sessions]
    if "--gpu-only" in given:
        chosen = [name for name in chosen if name in gpu_sessions]
    print(" ".join(chosen) if chosen else "(nothing affected)")
    if "--run" in given and chosen:
        offline = ["--no-venv"] if "--no-venv" in given else []
        session.run(sys.executable, "-m", "nox", *offline, "-s", *chosen, external=True)
