"""What the two-process test scripts share: each writes what its rank computed with :func:`save_rank`; the batch
runner (``ddp_batch.py``) leaves the process group once, after the last script."""

from pathlib import Path

import torch
import torch.distributed as dist


def save_rank(out: Path, payload: dict) -> None:
    """Write ``{"world": W, **payload}`` to ``out/rank{R}.pt`` (through a temporary name, so that a file that exists
    is whole), then wait for the other ranks: the next script starts on every rank together."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    partial = out / f".rank{rank}.pt.partial"
    torch.save({"world": world, **payload}, partial)
    partial.rename(out / f"rank{rank}.pt")
    if dist.is_initialized():
        dist.barrier()
