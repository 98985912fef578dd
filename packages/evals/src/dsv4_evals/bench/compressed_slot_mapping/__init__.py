"""The compressed slot mapping: its bench, gates, tuner and report section."""
