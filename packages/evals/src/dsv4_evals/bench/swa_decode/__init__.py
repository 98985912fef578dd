"""The SWA builder's decode-only step: its bench, gates, tuner and report section."""
