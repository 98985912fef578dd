"""SWA indices and lens: its bench, gates, tuner and report section."""
