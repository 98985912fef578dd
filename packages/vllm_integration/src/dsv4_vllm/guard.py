"""What must hold before the plugin touches vLLM: switch, version and signature.

Each check returns a reason string when the plugin must leave vLLM alone, or
``None`` when it may patch. Keeping them pure (no logging, no patching) lets the
tests drive them with monkeypatched versions and look-alike functions.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

SWITCH_VARIABLE = "DSV4_POLICY"
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"", "1", "on", "true", "yes"})

SUPPORTED_SERIES = "0.33"
_SUPPORTED_VERSION = re.compile(r"^0\.33\.\d+(?![0-9])")

TARGET_MODULE = "vllm.models.deepseek_v4.sparse_mla"
TARGET_FUNCTION = "build_c128a_topk_metadata"
BUILDER_CLASS = "DeepseekV4SparseMLAMetadataBuilder"

_REQUIRED = inspect.Parameter.empty
EXPECTED_PARAMETERS: tuple[tuple[str, Any], ...] = (
    ("positions", _REQUIRED),
    ("compress_ratio", _REQUIRED),
    ("num_decode_tokens", _REQUIRED),
    ("token_to_req_indices", _REQUIRED),
    ("block_table", _REQUIRED),
    ("block_size", _REQUIRED),
    ("slot_mapping", _REQUIRED),
    ("global_decode_buffer", _REQUIRED),
    ("decode_lens_buffer", _REQUIRED),
    ("prefill_buffer", _REQUIRED),
    ("max_compressed_tokens", 8192),
)
"""``build_c128a_topk_metadata`` in vLLM 0.33.x: names, order and defaults."""

EXPECTED_BUILDER_INIT = ("self", "kv_cache_spec", "layer_names", "vllm_config", "device")
"""``DeepseekV4SparseMLAMetadataBuilder.__init__`` in vLLM 0.33.x, for the warm-up hook."""


SWA_TARGET_MODULE = "vllm.v1.attention.backends.mla.sparse_swa"
SWA_TARGET_OBJECT = "_COMPUTE_SWA_INDICES_AND_LENS_KERNEL"
SWA_BUILDER_CLASS = "DeepseekSparseSWAMetadataBuilder"
SWA_EXPECTED_PARAMETERS: tuple[tuple[str, Any, inspect._ParameterKind], ...] = (
    *((name, _REQUIRED, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in (
        "swa_indices", "swa_lens", "window_size", "index_width", "left_visible",
        "right_visible", "query_start_loc", "seq_lens", "token_to_req_indices",
        "is_valid_token", "block_table", "block_size", "replay_start")),
    ("num_tokens", _REQUIRED, inspect.Parameter.KEYWORD_ONLY),
    ("token_offset", _REQUIRED, inspect.Parameter.KEYWORD_ONLY),
    ("has_image", False, inspect.Parameter.KEYWORD_ONLY),
)
"""``ComputeSWAIndicesAndLensKernel.__call__`` in vLLM 0.33.x (without ``self``)."""


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
        return f"{SWITCH_VARIABLE}={raw} turns the C128A launch policy off"
    return (
        f"{SWITCH_VARIABLE}={raw!r} is not understood (accepted: 0/off/false/no to turn "
        "the policy off, 1/on/true/yes or unset to turn it on), so the policy stays off"
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


def signature_reason(fn: Callable[..., Any]) -> str | None:
    """Why ``fn`` does not look like vLLM 0.33's ``build_c128a_topk_metadata``, or ``None``.

    Names, order, kind (all positional-or-keyword) and defaults must match: the
    wrapper reads arguments by position and by name, so any drift could make it
    read the wrong value.
    """
    params = _parameters(fn)
    if params is None:
        return f"{TARGET_MODULE}.{TARGET_FUNCTION} has no readable signature"
    got = [(p.name, p.default) for p in params]
    kinds_ok = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)
    if got != list(EXPECTED_PARAMETERS) or not kinds_ok:
        shown = ", ".join(str(p) for p in params)
        wanted = ", ".join(
            n if d is _REQUIRED else f"{n}={d!r}" for n, d in EXPECTED_PARAMETERS
        )
        return (
            f"{TARGET_MODULE}.{TARGET_FUNCTION} has the signature ({shown}); "
            f"the plugin expects ({wanted})"
        )
    return None


def swa_signature_reason(kernel: object) -> str | None:
    """Why ``kernel`` does not look like vLLM 0.33's SWA indices-and-lens object, or ``None``.

    The wrapper passes the 13 positional arguments and the keywords through unchanged
    and reads some by position, so names, order, kinds and defaults must all match.
    """
    where = f"{SWA_TARGET_MODULE}.{SWA_TARGET_OBJECT}"
    if not callable(kernel) or not callable(getattr(kernel, "register_warmup", None)):
        return f"{where} is not a callable kernel object with register_warmup"
    params = _parameters(kernel)  # type: ignore[arg-type]
    if params is None:
        return f"{where} has no readable call signature"
    got = [(p.name, p.default, p.kind) for p in params]
    if got != list(SWA_EXPECTED_PARAMETERS):
        shown = ", ".join(str(p) for p in params)
        return f"{where} is called as ({shown}); the plugin expects vLLM 0.33.0's arguments"
    return None


def builder_init_reason(init: Callable[..., Any]) -> str | None:
    """Why the metadata builder's ``__init__`` cannot carry the warm-up hook, or ``None``."""
    params = _parameters(init)
    names = tuple(p.name for p in params) if params is not None else None
    if names != EXPECTED_BUILDER_INIT:
        return (
            f"{TARGET_MODULE}.{BUILDER_CLASS}.__init__ takes {names}; the warm-up hook "
            f"expects {EXPECTED_BUILDER_INIT}"
        )
    return None
