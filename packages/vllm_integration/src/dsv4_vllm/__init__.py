"""dsv4-vllm: the vLLM plugin and serve launcher that apply dsv4 launch policy."""
