"""Warm-up at start-up: a thin wrap of a vLLM metadata builder's ``__init__``.

vLLM creates its DSV4 metadata builders while it sets up the KV cache, after the model
is loaded and before CUDA graphs are captured, and each builder knows the facts its
kernel's warm-up needs (for C128A the resolved ``max_model_len``, also with
``--max-model-len auto``, and the device of its buffers). Wrapping ``__init__`` runs
vLLM's own constructor unchanged and only then hands those facts to the dispatcher. A
failure in the hook is logged and never breaks the builder.

:func:`hook_init` is the one mechanism; each kernel names its mark and what to read
off the built builder (:func:`hook_builder_init` for C128A, ``swa_hook`` for SWA).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dsv4_vllm._log import logger
from dsv4_vllm.dispatch import C128ADispatch

_MARK = "__dsv4_builder_hook__"


def is_hooked(init: Callable[..., Any], mark: str = _MARK) -> bool:
    return bool(getattr(init, mark, False))


def hook_init(
    builder_cls: type, mark: str, on_ready: Callable[[Any], None], kernel: str
) -> Callable[..., Any]:
    """Wrap ``builder_cls.__init__`` once, calling ``on_ready(builder)`` after vLLM's own
    constructor; return the ``__init__`` that was there."""
    original_init = builder_cls.__init__
    if is_hooked(original_init, mark):
        return original_init.__wrapped__  # type: ignore[attr-defined, no-any-return]

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            on_ready(self)
        except Exception:
            logger.warning(
                "dsv4: the %s start-up warm-up hook failed; %s tiles will be warmed on the "
                "first table hit instead", kernel, kernel, exc_info=True,
            )

    setattr(__init__, mark, True)
    builder_cls.__init__ = __init__  # type: ignore[method-assign]
    return original_init


def unhook_init(builder_cls: type, mark: str) -> None:
    """Put back the ``__init__`` that :func:`hook_init` wrapped."""
    init = builder_cls.__dict__.get("__init__")
    if init is not None and is_hooked(init, mark):
        builder_cls.__init__ = init.__wrapped__  # type: ignore[method-assign]


def hook_builder_init(builder_cls: type, dispatch: C128ADispatch) -> Callable[..., Any]:
    """Warm C128A's compile keys once vLLM has built the DSV4 metadata builder."""

    def on_ready(builder: Any) -> None:
        if builder.compress_ratio == 128:
            dispatch.on_builder_ready(builder.compress_ratio, builder.model_config.max_model_len,
                                      builder.c128a_prefill_buffer.device)

    return hook_init(builder_cls, _MARK, on_ready, "C128A")


def unhook_builder_init(builder_cls: type) -> None:
    unhook_init(builder_cls, _MARK)
