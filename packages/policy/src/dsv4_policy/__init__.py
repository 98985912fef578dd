"""dsv4-policy: declarative launch tables with an unchanged fallback to upstream.

- :mod:`dsv4_policy.kernels`: one module per kernel (key, launch, tile, table schema,
  baseline, resolver, compile keys for warm-up), each with ``tables/<name>.toml``;
  :mod:`dsv4_policy.registry` finds them all.
- :mod:`dsv4_policy.serve`: serving envelopes, keep/avoid rules, launch manifests.
- :mod:`dsv4_policy.table`, :mod:`dsv4_policy.launch_table`: the shared table mechanism
  (TOML loading, validation, exact overlap detection, the hot-path index, rendering).

Pure Python, standard library only.
"""

__version__ = "0.1.0"
