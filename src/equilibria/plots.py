"""Figures: accuracy against the loop count, for ``equilibria eval`` / ``train`` / ``demo`` and the lm-eval runs.
matplotlib is optional; without it nothing is drawn and the callers say so."""

from __future__ import annotations

from pathlib import Path


def plot_loop_scaling(
    curves: dict[str, dict[int, float]],
    path: Path,
    title: str,
    mark: int | None = None,
    metric: str = "accuracy",
    data: str | None = None,
    mark_label: str = "trained",
    trained: list[int] | None = None,
) -> bool:
    """``metric`` (%) against ``num_loops`` (log scale), one line per curve, a dotted line at ``mark`` (the trained
    or configured loop count, labelled ``mark_label``), a shaded span over ``trained`` (``[fewest, most]``: the loop
    counts sampled in training), ``data`` (what it was computed on) under the title. Returns False (no file) when
    matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for (label, result), marker in zip(curves.items(), "osx^v"):
        ax.plot(list(result), [100 * v for v in result.values()], marker=marker, label=label)
    if trained is not None:
        ax.axvspan(
            trained[0], trained[1], color="gray", alpha=0.12, label=f"trained at {trained[0]}-{trained[1]} loops"
        )
    if mark is not None:
        ax.axvline(mark, color="gray", ls=":", lw=1, label=f"{mark_label}: {mark} loops")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({n for result in curves.values() for n in result}))
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())  # 1, 2, 4, ... rather than 2^0, 2^1, ...
    ax.set_xlabel("num_loops")
    ax.set_ylabel(f"{metric} (%)")
    ax.set_ylim(-3, 103)
    ax.set_title(title if data is None else f"{title}\n{data}", fontsize=10 if data is None else 8)
    ax.grid(alpha=0.3)
    if len(curves) > 1 or mark is not None or trained is not None:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


__all__ = ["plot_loop_scaling"]
