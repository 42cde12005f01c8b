"""Shared ending of the two-process test scripts: save this rank's results, then leave the process group cleanly.

Exiting with a live gloo process group can abort at interpreter shutdown ("terminate called without an active
exception") when one rank tears down while the other's background thread still runs; a barrier followed by
``destroy_process_group`` makes both ranks leave together."""

from pathlib import Path

import torch
import torch.distributed as dist

from equilibria.trainers import finish_distributed


def save_rank_and_finish(out: Path, payload: dict) -> None:
    """Write ``{"world": W, **payload}`` to ``out/rank{R}.pt`` and shut the process group down on every rank."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    torch.save({"world": world, **payload}, out / f"rank{rank}.pt")
    finish_distributed()
