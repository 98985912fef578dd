"""SWA warm-up at start-up: a thin wrap of vLLM's SWA metadata builder's ``__init__``.

vLLM builds ``DeepseekSparseSWAMetadataBuilder`` while it sets up the KV cache, before
CUDA graphs are captured. Its constructor knows every fact the SWA compile keys depend
on: the window, the SWA cache block size, the image tokens a prefill row may add, and
the device. The wrap runs vLLM's constructor unchanged, then hands those facts to the
dispatcher; a failure in the hook is logged and never breaks the builder.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dsv4_vllm._log import logger
from dsv4_vllm.swa_dispatch import SWADispatch

_MARK = "__dsv4_swa_builder_hook__"


def is_hooked(init: Callable[..., Any]) -> bool:
    return bool(getattr(init, _MARK, False))


def hook_swa_builder_init(builder_cls: type, dispatch: SWADispatch) -> Callable[..., Any]:
    """Wrap ``builder_cls.__init__`` (once); return the ``__init__`` that was there."""
    original_init = builder_cls.__init__
    if is_hooked(original_init):
        return original_init.__wrapped__  # type: ignore[attr-defined, no-any-return]

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            dispatch.on_builder_ready(self.window_size, self.block_size,
                                      int(getattr(self, "max_image_tokens", 0)),
                                      self.decode_swa_indices.device)
        except Exception:
            logger.warning("dsv4: the SWA start-up warm-up hook failed; SWA tiles will be "
                           "warmed on the first table hit instead", exc_info=True)

    setattr(__init__, _MARK, True)
    builder_cls.__init__ = __init__  # type: ignore[method-assign]
    return original_init


def unhook_swa_builder_init(builder_cls: type) -> None:
    """Put back the ``__init__`` that :func:`hook_swa_builder_init` wrapped."""
    init = builder_cls.__dict__.get("__init__")
    if init is not None and is_hooked(init):
        builder_cls.__init__ = init.__wrapped__  # type: ignore[method-assign]
