"""Warm-up at start-up: a thin wrap of a vLLM metadata builder's ``__init__``.

vLLM creates its DSV4 metadata builders while it sets up the KV cache, after the model
is loaded and before CUDA graphs are captured, and each builder knows the facts its
kernel's warm-up needs (for C128A the resolved ``max_model_len``, also with
``--max-model-len auto``; for SWA the window and block size; and the device of its
buffers). Wrapping ``__init__`` runs vLLM's own constructor unchanged and only then
hands the built builder to the kernel's ``on_ready``. A failure in the hook is logged
and never breaks the builder.

Several kernels may hook the same class: one wrap holds each kernel's hook under its
own :func:`mark`, so each is added and removed on its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from dsv4_vllm._log import logger

_HOOKS = "__dsv4_hooks__"


def mark(name: str) -> str:
    """The key under which kernel ``name``'s hook is registered on a builder's ``__init__``."""
    return f"__dsv4_{name}_builder_hook__"


def is_hooked(init: Callable[..., Any], mark: str) -> bool:
    """Whether ``init`` is the wrap of :func:`hook_init` and carries ``mark``'s hook."""
    return mark in getattr(init, _HOOKS, {})


def hook_init(
    builder_cls: type, mark: str, on_ready: Callable[[Any], None], label: str
) -> Callable[..., Any]:
    """Call ``on_ready(builder)`` after vLLM's own ``builder_cls.__init__``, once per
    ``mark``; return vLLM's ``__init__``.

    One wrap per class holds every kernel's hook, in the order they were added.
    """
    own = vars(builder_cls).get("__init__")
    hooks: dict[str, tuple[Callable[[Any], None], str]] | None = getattr(own, _HOOKS, None)
    if hooks is None:
        original_init = builder_cls.__init__  # the class's own, or the one it inherits
        hooks = {}

        @functools.wraps(original_init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original_init(self, *args, **kwargs)
            for on_ready_, label_ in list(hooks.values()):
                try:
                    on_ready_(self)
                except Exception:
                    logger.warning(
                        "dsv4: the %s start-up warm-up hook failed; %s tiles will be warmed "
                        "on the first table hit instead", label_, label_, exc_info=True,
                    )

        setattr(__init__, _HOOKS, hooks)
        builder_cls.__init__ = __init__  # type: ignore[method-assign]
        own = __init__
    hooks.setdefault(mark, (on_ready, label))
    return own.__wrapped__  # type: ignore[union-attr, no-any-return]


def unhook_init(builder_cls: type, mark: str) -> None:
    """Remove ``mark``'s hook; with none left, put back vLLM's own ``__init__``."""
    init = builder_cls.__dict__.get("__init__")
    hooks = getattr(init, _HOOKS, None)
    if hooks is None:
        return
    hooks.pop(mark, None)
    if not hooks:
        builder_cls.__init__ = init.__wrapped__  # type: ignore[method-assign, union-attr]
