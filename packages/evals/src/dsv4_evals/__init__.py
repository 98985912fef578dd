"""dsv4-evals: harnesses and gates that judge whether a change is safe and fast."""
