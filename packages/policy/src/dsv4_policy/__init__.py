"""dsv4-policy: declarative launch tables with an unchanged fallback to upstream.

- :mod:`dsv4_policy.c128a`: C128A top-k metadata launches (baseline formula, table
  resolver, compile keys for warm-up, table writer).
- :mod:`dsv4_policy.serve`: serving envelopes, keep/avoid rules, launch manifests.
- :mod:`dsv4_policy.table`: the shared table mechanism (TOML loading, validation,
  exact overlap detection, resolve with fallback).

Pure Python, standard library only.
"""

__version__ = "0.1.0"
