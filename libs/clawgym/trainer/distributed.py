"""Data-parallel plumbing: the process group under `torchrun`, FSDP2 sharding, and object collectives.

Owns how ranks find each other and exchange Python objects (rank 0 reads the store and hands each
rank its trees) and how a policy is sharded (`fully_shard` per decoder layer, then the whole
`PolicyModule` as the root, so the tied embedding / LM head and the value head live in the root's
unit). A single process is a `World` of size 1 and every collective is the identity.

Rules the trainer keeps under FSDP2:
1. Every rank runs the same number of forwards (and backwards) per phase: a rank with fewer
   micro-batches runs zero-weighted copies of one (`update.py`), since each forward all-gathers.
2. FSDP2 averages gradients over ranks; the loss is normalised over the global batch, so each rank
   multiplies its loss by the world size to make the reduced gradient the global sum.
"""

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from clawgym.trainer.config import FsdpSettings


@dataclass
class World:
    """This process's place among the data-parallel ranks (size 1: no process group)."""

    rank: int = 0
    size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    mesh: Any = None  # torch DeviceMesh when size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def max_int(self, value: int) -> int:
        if self.size == 1:
            return value
        t = torch.tensor([value], dtype=torch.long, device=self._comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if self.size == 1:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0, device=self._comm_device())
        return box[0]

    def scatter(self, per_rank: list[Any] | None) -> Any:
        """Rank 0 gives `per_rank[r]` to rank r (other ranks pass None)."""
        if self.size == 1:
            assert per_rank is not None
            return per_rank[0]
        out: list[Any] = [None]
        dist.scatter_object_list(out, per_rank if self.is_main else None, src=0)
        return out[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, on every rank, in rank order."""
        if self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def close(self) -> None:
        # All ranks meet first: gloo aborts the process ("terminate called without an active
        # exception") when one rank tears its pairs down while a peer still has work on them.
        if self.size > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def _comm_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")


def init_world(timeout_s: float = 3600.0) -> World:
    """The world torchrun describes (RANK, WORLD_SIZE, LOCAL_RANK env), or a single process.

    NCCL on CUDA, gloo on CPU. The timeout is long because ranks > 0 wait in a collective while
    rank 0 waits for rollouts.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        return World(device=device)
    return join_world(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")), timeout_s)


def join_world(rank: int, size: int, local_rank: int = 0, timeout_s: float = 3600.0) -> World:
    """Joins (or creates) the default process group; MASTER_ADDR/MASTER_PORT come from the env."""
    from torch.distributed.device_mesh import init_device_mesh

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if cuda else "gloo", rank=rank, world_size=size, timeout=timedelta(seconds=timeout_s)
        )
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    mesh = init_device_mesh(device.type, (size,))
    return World(rank=rank, size=size, device=device, mesh=mesh)


def shard(
    module: nn.Module, layers: list[nn.Module], world: World, settings: FsdpSettings | None = None
) -> None:
    """FSDP2: each decoder layer its own unit, then `module` (the root: embeddings, head, value head),
    as `settings` (`trainer.fsdp`) asks: resharding, mixed precision, CPU offload."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    settings = settings or FsdpSettings()
    param_dtype = None if settings.param_dtype == "auto" else getattr(torch, settings.param_dtype)
    reduce_dtype = torch.float32 if settings.reduce_dtype == "auto" else getattr(torch, settings.reduce_dtype)
    options = {
        "mesh": world.mesh,
        "reshard_after_forward": settings.reshard_after_forward,
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype),
        # pinned host memory only where there is a device to copy to
        "offload_policy": CPUOffloadPolicy(pin_memory=world.device.type == "cuda")
        if settings.cpu_offload
        else OffloadPolicy(),
    }
    for layer in layers:
        fully_shard(layer, **options)
    fully_shard(module, **options)


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's full value (a collective under FSDP2); plain tensors as they are."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
