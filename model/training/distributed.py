"""The process group of a training run: one process, or one rank of a ``torchrun`` job (DistributedDataParallel)."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist


class Run:
    """Process-group facts: a single process, or one rank of a torchrun job."""

    def __init__(self, device_name: str) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device_name == "auto":
            device_name = "cuda" if torch.cuda.is_available() else "cpu"
        if device_name == "cuda" and self.world > 1:
            device_name = f"cuda:{local_rank}"
        self.device = torch.device(device_name)
        if self.world > 1:
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def all_sum(self, value: float) -> float:
        if self.world == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return float(tensor)

    def broadcast(self, value: Any) -> Any:
        """Rank 0's ``value`` (any picklable object) on every rank."""
        if self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, device=self.device)
        return box[0]
