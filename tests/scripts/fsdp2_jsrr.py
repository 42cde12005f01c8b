"""Run by `ddp_batch.py` under `torchrun --nproc_per_node 2`: one STARS-objective step of a tiny Ouro model sharded with FSDP2
(`fully_shard`) on gloo, each rank on its half of a batch of 4, in each of three setups (`SETUPS`): the whole model
as one unit with the "vjp" estimator, one unit per decoder layer with "jvp", and per layer with "vjp", which the
model refuses (torch crashes on a backward pass inside a forward over per-layer FSDP2 units). The JSRR estimate
comes from the model's own forward (`spectral_radius_iters`), the only place it can be computed once parameters
are resharded. Each rank writes, per setup, the gathered full parameters after the step (or the error) to
OUT/rank{R}.pt.

`reference_step(estimator)` is the same step without sharding on the whole batch (the test compares them)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for conftest

JSRR_WEIGHT, LEARNING_RATE = 0.3, 0.05
SETUPS = {"one unit, vjp": (False, "vjp"), "per layer, jvp": (True, "jvp"), "per layer, vjp": (True, "vjp")}


def build_model():
    from conftest import tiny_ouro

    return tiny_ouro(seed=0).train()


def batch() -> torch.Tensor:
    return torch.stack([torch.arange(3, 11) + 2 * i for i in range(4)])


def sgd_step(model, ids: torch.Tensor, estimator: str) -> None:
    """STARS' loss, (1 - w) * LM loss + w * mean(rho^2) with rho estimated in the forward from per-row probes,
    then one SGD step."""
    from equilibria.trainers.stars import row_probes

    start = row_probes({"input_ids": ids}, model.config.hidden_size, seed=0, step=0)
    out = model(
        ids,
        labels=ids,
        num_loops=2,
        spectral_radius_iters=2,
        spectral_radius_estimator=estimator,
        spectral_radius_start=start,
    )
    ((1 - JSRR_WEIGHT) * out.loss + JSRR_WEIGHT * (out.spectral_radius.float() ** 2).mean()).backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= LEARNING_RATE * p.grad


def reference_step(estimator: str) -> dict:
    model = build_model()
    sgd_step(model, batch(), estimator)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def sharded_step(mesh, rank: int, per_layer: bool, estimator: str) -> dict:
    from torch.distributed.fsdp import fully_shard

    model = build_model()
    for layer in model.model.layers if per_layer else ():
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    try:
        sgd_step(model, batch()[2 * rank : 2 * rank + 2], estimator)  # gradients averaged over the ranks
    except ValueError as err:
        return {"error": str(err)}
    params = {name: p.detach().full_tensor().clone() for name, p in model.named_parameters()}
    return {"params": params, "sharded": type(next(model.parameters())).__name__}


def main(out: Path) -> None:
    import torch.distributed as dist
    from ddp_common import save_rank
    from torch.distributed.device_mesh import init_device_mesh

    if not dist.is_initialized():  # the scripts before it in the batch started it
        dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    results = {name: sharded_step(mesh, dist.get_rank(), *setup) for name, setup in SETUPS.items()}
    save_rank(out, results)
