"""The report's launch plot: µs per launch against tokens, prefill and decode side by side.

Every kernel's section draws the same figure (log-log, one line per launch compared,
plus the empty launch + write floor), so its reader compares kernels at a glance; the
section says which rows, series and titles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

Series = Sequence[tuple[str, str, str]]
"""``(row key, line style, legend label)`` per line; the last one is usually the floor."""


def phases(rows: Sequence[Mapping], path: Path, title: str, series: Series, *,
           xlabel: str, panel_title: Callable[[str], str],
           keep: Callable[[Mapping], bool] = lambda r: True) -> None:
    """Write ``path``: one panel per phase (prefill, decode) of the rows ``keep`` selects."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, phase in zip(axes, ("prefill", "decode"), strict=True):
        sel = sorted((r for r in rows if r["phase"] == phase and keep(r)),
                     key=lambda r: r["tokens"])
        if not sel:
            continue
        tokens = [r["tokens"] for r in sel]
        for key, style, label in series:
            ax.plot(tokens, [r[key] for r in sel], style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("µs per launch (CUDA-graph replay median)")
        ax.set_title(panel_title(phase))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
