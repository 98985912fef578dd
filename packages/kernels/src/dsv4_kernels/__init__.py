"""dsv4-kernels: Triton kernels for DeepSeek-V4 metadata and their torch references."""
