"""CombineTopkSwaIndices (vLLM's combine_topk_swa_indices): bench, gates, tuner, report."""
