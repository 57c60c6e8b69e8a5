"""The processes of one evaluation: torch.distributed's process group, when a launcher started several.

``torchrun``, ``accelerate launch`` and SLURM's ``srun`` start one process per device and tell each, in its
environment, its rank and the world size (torchrun and accelerate: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``;
SLURM's ``srun``: ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``, ``SLURM_LOCALID``, the tasks of the job step; a job's
batch script, which is one process, has no step of several tasks and is not taken for a launch). :func:`join` reads them and joins the default
process group (NCCL on GPUs, gloo on CPU), with an explicit timeout; without them it returns :data:`ONE`, a
world of one process, and nothing of torch.distributed is touched.

The work is split with :func:`share`: contiguous, unpadded slices, so that no item is done twice or lost for any
world size. The processes meet only between stages (:meth:`Processes.barrier`), never inside a long loop.

Example:
    >>> share(10, rank=1, world=3)
    range(3, 6)
    >>> [len(share(10, rank, 3)) for rank in range(3)]
    [3, 3, 4]
    >>> ONE.rank, ONE.world, ONE.is_main
    (0, 1, True)
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, TypeVar

logger = logging.getLogger(__name__)

# How long a process waits for the others at a stage's end. A process that finished its share waits there for
# the slowest one; after a resume, that can be a whole stage (every other share was cached). The ITM stage of a
# full BLIP run takes hours on one GPU, so the wait allowed is a day, not torch's 30 minutes (NCCL's 10).
DEFAULT_TIMEOUT = datetime.timedelta(hours=24)

T = TypeVar("T")

_LAUNCHERS = (("RANK", "WORLD_SIZE", "LOCAL_RANK"), ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"))


@dataclass(frozen=True)
class Processes:
    """This process's place among the processes of one evaluation.

    Attributes:
        rank: this process's number, 0 to ``world - 1``; rank 0 scores the galleries and writes the report.
        world: how many processes there are.
        local_rank: the process's number on its machine (which GPU it takes).
        backend: the torch.distributed backend (``"nccl"``, ``"gloo"``), or None for one process.
    """

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: Optional[str] = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def name(self) -> str:
        """``"rank 1 of 3"``: how messages name this process."""
        return f"rank {self.rank} of {self.world}"

    def barrier(self) -> None:
        """Wait until every process gets here (nothing with one process)."""
        if self.world > 1:
            import torch.distributed as dist

            if self.backend == "nccl":
                import torch

                dist.barrier(device_ids=[torch.cuda.current_device()])
            else:
                dist.barrier()

    def main_first(self, make: Callable[[], T]) -> T:
        """``make()`` on rank 0 first, then on the others once rank 0 is done: what rank 0 fetches into a shared
        cache (a first run's annotation files), the others find there. Every process calls it, at the same point.

        Example:
            >>> ONE.main_first(lambda: "made")
            'made'
        """
        if not self.is_main:
            self.barrier()
        made = make()
        if self.is_main:
            self.barrier()
        return made

    def gathered(self, items) -> list:
        """Every process's ``items``, in rank order, on every process; ``items`` as a list with one process. A
        collective: every process calls it, at the same point.

        Example:
            >>> ONE.gathered(("a", "b"))
            ['a', 'b']
        """
        if self.world == 1:
            return list(items)
        import torch.distributed as dist

        every: list = [None] * self.world
        dist.all_gather_object(every, list(items))
        self.barrier()  # no process leaves the group while another still exchanges its part (gloo aborts then)
        return [item for part in every for item in part]

    def leave(self) -> None:
        """Leave the process group (after the last barrier)."""
        if self.world > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


ONE = Processes()


def launched(environ: Mapping[str, str] = os.environ) -> Optional[tuple[int, int, int]]:
    """``(rank, world size, local rank)`` that a launcher put in ``environ``, or None when none did.

    Example:
        >>> launched({"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0"})
        (2, 4, 0)
        >>> launched({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_LOCALID": "1"})
        (1, 2, 1)
        >>> launched({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) is None  # an sbatch script: one process
        True
        >>> launched({}) is None
        True
    """
    for names in _LAUNCHERS:
        if names[0] in environ and names[1] in environ:
            try:
                rank, world = int(environ[names[0]]), int(environ[names[1]])
                local_rank = int(environ.get(names[2], rank))
            except ValueError:
                raise ValueError(f"the launcher's {'/'.join(names)} must be integers, got "
                                 f"{[environ.get(name) for name in names]}") from None
            if not 0 <= rank < world:
                raise ValueError(f"the launcher's {names[0]} is {rank}, outside 0 to {names[1]} - 1 = {world - 1}")
            return rank, world, local_rank
    return None


def join(device: Optional[str] = None, timeout: datetime.timedelta = DEFAULT_TIMEOUT,
         environ: Mapping[str, str] = os.environ) -> Processes:
    """Join the process group that the launcher started (see the module docstring), or return :data:`ONE`.

    Args:
        device: the torch device asked for (``--device``); None: CUDA when available. With CUDA each process
            takes GPU ``local_rank`` and the backend is NCCL, else gloo.
        timeout: how long a collective may wait (:data:`DEFAULT_TIMEOUT`).

    SLURM sets no ``MASTER_ADDR``: the job script exports it (see the docs' SLURM recipe); torchrun and accelerate
    set it themselves.
    """
    found = launched(environ)
    if found is None or found[1] == 1:
        return ONE
    rank, world, local_rank = found
    import torch
    import torch.distributed as dist

    if "MASTER_ADDR" not in environ:
        raise ValueError(f"{world} processes were launched but MASTER_ADDR is not set: export MASTER_ADDR (the first "
                         "node's host name) and MASTER_PORT before srun, as the SLURM recipe of the distributed "
                         "evaluation docs does")
    for name, value in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", local_rank)):
        os.environ.setdefault(name, str(value))  # SLURM's numbers, for torch's env:// rendezvous
    os.environ.setdefault("MASTER_PORT", "29500")
    cuda = torch.cuda.is_available() and (device is None or str(device).startswith("cuda"))
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, timeout=timeout)
    logger.info("rank %d of %d joined the process group (%s, timeout %s)", rank, world, backend, timeout)
    return Processes(rank, world, local_rank, backend)


def share(count: int, rank: int, world: int) -> range:
    """The contiguous slice of ``range(count)`` that ``rank`` of ``world`` processes takes (the last ones take
    one more when ``count`` does not divide; none is padded)."""
    return range(count * rank // world, count * (rank + 1) // world)


def rank_device(processes: Processes, device: Optional[str]) -> Optional[str]:
    """The device of this process: ``cuda:<local rank>`` for a CUDA run of several processes, else ``device``.

    Example:
        >>> rank_device(Processes(1, 2, 1, "nccl"), None), rank_device(Processes(1, 2, 1, "gloo"), "cpu")
        ('cuda:1', 'cpu')
    """
    if processes.backend == "nccl" and (device is None or device == "cuda"):
        return f"cuda:{processes.local_rank}"
    return device
