"""What the processes of a multi-process job agree on: a stop, a finished checkpoint, a resume point.

Under torchrun or accelerate every rank runs the whole job. Each decision that must be the same
everywhere is made by one collective call here; in a plain run (one process, no process group)
each call is the identity and costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _group() -> Any | None:
    """torch.distributed when a process group of several ranks is up, else None."""
    import sys

    if "torch" not in sys.modules:  # no process group can exist before torch is imported
        return None
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1 else None


def start(gpu: bool) -> None:
    """Join the job's process group (accelerate's, which the trainer reuses), so that decisions taken
    before the trainer exists (which checkpoint to resume) can be shared."""
    from accelerate import PartialState

    PartialState(cpu=not gpu)


def largest(value: int) -> int:
    """The largest of every rank's ``value``."""
    dist = _group()
    if dist is None:
        return value
    import torch

    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor([value], dtype=torch.long, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def barrier() -> None:
    """Wait until every rank is here."""
    dist = _group()
    if dist is not None:
        dist.barrier()


def from_primary(value: T) -> T:
    """Rank 0's ``value`` on every rank (the others' are dropped)."""
    dist = _group()
    if dist is None:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def decided_by_primary(decide: Callable[[], T]) -> T:
    """``decide()`` run on rank 0 alone, its answer (or its error) shared with every rank.

    For decisions with side effects on the job folder, such as setting a damaged checkpoint aside:
    taken once, they can't race, and every rank continues from the same one."""
    if _group() is None:
        return decide()
    answer: tuple[bool, Any] = (True, None)
    if _rank() == 0:
        try:
            answer = (True, decide())
        except Exception as exc:  # every rank raises it, so the job ends the same everywhere
            answer = (False, exc)
    ok, value = from_primary(answer)
    if not ok:
        raise value
    return value


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()
