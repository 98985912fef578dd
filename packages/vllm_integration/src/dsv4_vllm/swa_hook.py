"""SWA warm-up at start-up, through :func:`dsv4_vllm.builder_hook.hook_init`.

vLLM builds ``DeepseekSparseSWAMetadataBuilder`` while it sets up the KV cache, before
CUDA graphs are captured. Its constructor knows every fact the SWA compile keys depend
on: the window, the SWA cache block size, the image tokens a prefill row may add, and
the device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dsv4_vllm.builder_hook import hook_init, unhook_init
from dsv4_vllm.builder_hook import is_hooked as _is_hooked
from dsv4_vllm.swa_dispatch import SWADispatch

_MARK = "__dsv4_swa_builder_hook__"
is_hooked = functools.partial(_is_hooked, mark=_MARK)


def hook_swa_builder_init(builder_cls: type, dispatch: SWADispatch) -> Callable[..., Any]:
    """Wrap ``builder_cls.__init__`` (once); return the ``__init__`` that was there."""

    def on_ready(builder: Any) -> None:
        dispatch.on_builder_ready(builder.window_size, builder.block_size,
                                  int(getattr(builder, "max_image_tokens", 0)),
                                  builder.decode_swa_indices.device)

    return hook_init(builder_cls, _MARK, on_ready, "SWA")


def unhook_swa_builder_init(builder_cls: type) -> None:
    """Put back the ``__init__`` that :func:`hook_swa_builder_init` wrapped."""
    unhook_init(builder_cls, _MARK)
