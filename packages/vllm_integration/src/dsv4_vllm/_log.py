"""The package's logger, placed under vLLM's ``vllm`` logger on purpose.

vLLM configures a handler on its ``vllm`` logger only (with ``propagate=False``), so a
child logger inherits vLLM's format, level and stream: the plugin's lines appear in a
server's log next to vLLM's own, with no logging set-up of ours. Every message starts
with ``dsv4`` so it can be found with ``grep dsv4``.
"""

from __future__ import annotations

import logging

LOGGER_NAME = "vllm.dsv4"
logger = logging.getLogger(LOGGER_NAME)
