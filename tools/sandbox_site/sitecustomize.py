"""Interpreter start-up inside an execution root: forget the repository's own sources.

Workspace packages are installed editable, so every venv's ``.pth`` files put the
repository's real ``packages/*/src`` folders on ``sys.path``. Inside an execution root
those folders would let a run import a module its cache key never hashed. The sandbox
puts its own copies first on ``PYTHONPATH`` and names the real folders in
``DSV4_SANDBOX_HIDE``; this module, which Python imports at start-up, removes them from
``sys.path``, then hands over to any other ``sitecustomize`` the interpreter has.
"""

from __future__ import annotations

import os
import sys


def _hide() -> None:
    hidden = [os.path.realpath(p) for p in os.environ.get("DSV4_SANDBOX_HIDE", "").split(
        os.pathsep) if p]
    if not hidden:
        return

    def inside(entry: str) -> bool:
        real = os.path.realpath(entry or os.curdir)
        return any(real == h or real.startswith(h + os.sep) for h in hidden)

    sys.path[:] = [entry for entry in sys.path if not inside(entry)]


def _chain() -> None:
    """Import the next ``sitecustomize`` on the path, as if this one were not there."""
    here = os.path.dirname(os.path.realpath(__file__))
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if os.path.realpath(p or os.curdir) != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the interpreter's own, if any)
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules.setdefault("sitecustomize", mine)


_hide()
_chain()
