"""Warm-up at start-up: a thin wrap of the DSV4 metadata builder's ``__init__``.

vLLM creates the builder while it sets up the KV cache, after the model is loaded
and before CUDA graphs are captured, and the builder knows the two facts the
warm-up needs: the resolved ``max_model_len`` (also with ``--max-model-len auto``)
and the device its C128A buffers live on. Wrapping ``__init__`` runs vLLM's own
constructor unchanged and only then hands those facts to the dispatcher. A failure
in the hook is logged and never breaks the builder.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dsv4_vllm._log import logger
from dsv4_vllm.dispatch import C128ADispatch

_MARK = "__dsv4_builder_hook__"


def is_hooked(init: Callable[..., Any]) -> bool:
    return bool(getattr(init, _MARK, False))


def hook_builder_init(builder_cls: type, dispatch: C128ADispatch) -> Callable[..., Any]:
    """Wrap ``builder_cls.__init__`` (once); return the ``__init__`` that was there."""
    original_init = builder_cls.__init__
    if is_hooked(original_init):
        return original_init.__wrapped__  # type: ignore[attr-defined, no-any-return]

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            compress_ratio = self.compress_ratio
            if compress_ratio == 128:
                dispatch.on_builder_ready(
                    compress_ratio,
                    self.model_config.max_model_len,
                    self.c128a_prefill_buffer.device,
                )
        except Exception:
            logger.warning(
                "dsv4: the start-up warm-up hook failed; C128A tiles will be warmed "
                "on the first table hit instead",
                exc_info=True,
            )

    setattr(__init__, _MARK, True)
    builder_cls.__init__ = __init__  # type: ignore[method-assign]
    return original_init


def unhook_builder_init(builder_cls: type) -> None:
    """Put back the ``__init__`` that :func:`hook_builder_init` wrapped."""
    init = builder_cls.__dict__.get("__init__")
    if init is not None and is_hooked(init):
        builder_cls.__init__ = init.__wrapped__  # type: ignore[method-assign]
