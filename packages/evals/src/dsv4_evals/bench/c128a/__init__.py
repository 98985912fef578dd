"""C128A top-k metadata: its bench, gates, tuner and report section."""
