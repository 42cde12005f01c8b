"""Run under ``torchrun --nproc_per_node 2``: ``ddp_batch.py ROOT NAME [NAME ...]`` runs the two-process test
scripts ``NAME.py`` of this folder in turn, in one process group, each with ``ROOT/NAME`` as its folder (where it
writes ``rank{R}.pt``), then leaves the process group once. One launch for every script: a torchrun start costs
about 6 s of imports on two cores, more than most scripts' own work.

Exiting with a live gloo process group can abort at interpreter shutdown ("terminate called without an active
exception") when one rank tears down while the other's background thread still runs; ``finish_distributed`` (a
barrier, then ``destroy_process_group``) makes both ranks leave together."""

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for conftest
sys.path.insert(0, str(Path(__file__).resolve().parent))

from equilibria.trainers import finish_distributed  # noqa: E402


def main(root: Path, names: list[str]) -> None:
    for name in names:
        importlib.import_module(name).main(root / name)
    finish_distributed()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
