"""One DeepSeek-V4 step through vLLM's own metadata builders, plugin off and on."""
