"""Figures: accuracy against the loop count, for ``equilibria eval`` / ``train`` / ``demo`` and the lm-eval runs.
matplotlib is optional; without it nothing is drawn and the callers say so."""

from __future__ import annotations

from pathlib import Path


def plot_loop_scaling(curves: dict[str, dict[int, float]], path: Path, title: str, mark: int | None = None) -> bool:
    """Accuracy (%) against ``num_loops`` (log scale), one line per curve, a dotted line at ``mark`` (e.g. the
    trained loop count). Returns False (no file) when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for (label, result), marker in zip(curves.items(), "osx^v"):
        ax.plot(list(result), [100 * v for v in result.values()], marker=marker, label=label)
    if mark is not None:
        ax.axvline(mark, color="gray", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("num_loops")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(curves) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


__all__ = ["plot_loop_scaling"]
