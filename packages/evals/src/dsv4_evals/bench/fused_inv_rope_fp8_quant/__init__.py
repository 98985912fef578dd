"""FusedInvRopeFP8Quant (inverse RoPE + block FP8 quant): its bench, gates, tuner, report."""
