"""What must hold before the plugin touches vLLM: switch, version and signature.

Each check returns a reason string when the plugin must leave vLLM alone, or
``None`` when it may patch. Keeping them pure (no logging, no patching) lets the
tests drive them with monkeypatched versions and look-alike objects. The checks are
the same for every kernel; what each kernel's vLLM object must look like is its
:class:`Signature`, declared in ``dsv4_vllm/kernels/<name>.py``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SWITCH_VARIABLE = "DSV4_POLICY"
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"", "1", "on", "true", "yes"})

SUPPORTED_SERIES = "0.33"
_SUPPORTED_VERSION = re.compile(r"^0\.33\.\d+(?![0-9])")

REQUIRED = inspect.Parameter.empty
"""The default of a parameter without one, in :attr:`Signature.parameters`."""
POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
KEYWORD = inspect.Parameter.KEYWORD_ONLY


def switch_off_reason(environ: Mapping[str, str]) -> str | None:
    """Why ``DSV4_POLICY`` turns the plugin off, or ``None`` when it is on.

    Unset, empty, ``1``, ``on``, ``true`` and ``yes`` mean on; ``0``, ``off``,
    ``false`` and ``no`` mean off (case-insensitive). Any other value also means
    off: a typo in a kill switch must not silently leave the patch in place.
    """
    raw = environ.get(SWITCH_VARIABLE)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in _ON:
        return None
    if value in _OFF:
        return f"{SWITCH_VARIABLE}={raw} turns every dsv4 launch policy off"
    return (
        f"{SWITCH_VARIABLE}={raw!r} is not understood (accepted: 0/off/false/no to turn "
        "the policies off, 1/on/true/yes or unset to turn them on), so they stay off"
    )


def version_reason(version: str) -> str | None:
    """Why ``version`` of vLLM is not one the patch was written for, or ``None``."""
    if _SUPPORTED_VERSION.match(version):
        return None
    return (
        f"vLLM {version} is not a supported version (the plugin supports "
        f"{SUPPORTED_SERIES}.x only)"
    )


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Signature:
    """What a vLLM object must look like before its stand-in replaces it.

    A stand-in reads vLLM's call by position and by name, so any drift in names,
    order, kinds or defaults could make it read the wrong value: the object must match
    exactly, and also have every callable in ``attributes`` (vLLM's own API on it that
    the stand-in forwards).
    """

    parameters: tuple[tuple[str, Any, inspect._ParameterKind], ...]
    """``(name, default or REQUIRED, kind)`` in call order (without ``self``)."""
    attributes: tuple[str, ...] = ()

    def expected(self) -> inspect.Signature:
        return inspect.Signature([inspect.Parameter(name, kind, default=default)
                                  for name, default, kind in self.parameters])

    def reason(self, obj: object, where: str) -> str | None:
        """Why ``obj`` (found at ``where``) is not the expected object, or ``None``."""
        if not callable(obj) or not all(callable(getattr(obj, a, None))
                                        for a in self.attributes):
            extra = f" with {', '.join(self.attributes)}" if self.attributes else ""
            return f"{where} is not a callable{extra}"
        params = _parameters(obj)
        if params is None:
            return f"{where} has no readable signature"
        if [(p.name, p.default, p.kind) for p in params] != list(self.parameters):
            return (f"{where} has the signature {inspect.Signature(params)}; the plugin "
                    f"expects {self.expected()}")
        return None


def builder_init_reason(init: Callable[..., Any], where: str,
                        expected: tuple[str, ...]) -> str | None:
    """Why a metadata builder's ``__init__`` cannot carry the warm-up hook, or ``None``."""
    params = _parameters(init)
    names = tuple(p.name for p in params) if params is not None else None
    if names != expected:
        return f"{where}.__init__ takes {names}; the warm-up hook expects {expected}"
    return None
