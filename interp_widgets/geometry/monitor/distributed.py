"""Distributed gathering for the monitor: with ``torch.distributed`` initialised and world size > 1, every rank's
captured rows are all-gathered (padded to the largest rank) so that rank 0 measures their union. Its numbers equal a
single-process run on the concatenated batch (exactly when no subsampling happens; ``max_tokens`` applies per rank).
The recorded loss is the mean of the ranks' losses. Ranks other than 0 keep no measurement rows. In weight mode ``G``
is the (already all-reduced) weight gradient of rank 0.

Example:
    >>> world_size()  # a single process
    1
"""

from __future__ import annotations

import math

import torch

__all__ = ["world_size", "gather_rows", "gather"]


def world_size() -> int:
    """Number of processes of the initialised default group, 1 without ``torch.distributed``.

    Example:
        >>> world_size()
        1
    """
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gather_rows(rows: torch.Tensor) -> torch.Tensor:
    """All-gather ``n_r × d`` row blocks of different lengths; returns their concatenation in rank order.

    Collective: every rank must call it. Example (a one-process gloo group; with more ranks, every rank gets the
    blocks of all of them):
        >>> import torch.distributed as dist
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> try:
        ...     print(gather_rows(torch.ones(5, 8)).shape)
        ... finally:
        ...     dist.destroy_process_group()
        torch.Size([5, 8])
    """
    dist = torch.distributed
    world = dist.get_world_size()
    count = torch.tensor([rows.shape[0]], device=rows.device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    longest = int(max(int(c) for c in counts))
    padded = rows.new_zeros((longest, rows.shape[1]))
    padded[: rows.shape[0]] = rows
    blocks = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(blocks, padded)
    return torch.cat([block[: int(c)] for block, c in zip(blocks, counts)])


def gather(data: dict, loss: torch.Tensor | None, gradient: str):
    """Rank 0 gets the union of every rank's rows and the mean loss; other ranks get ``(None, None)``.

    ``data`` maps layers to ``(H, G)``; in weight mode (``gradient="weight"``) ``G`` is already all-reduced and
    only ``H`` is gathered. Collective: every rank must call it. Example (a one-process gloo group):
        >>> import torch.distributed as dist
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        >>> try:
        ...     data, loss = gather({"layer:0": (torch.ones(3, 4), torch.ones(3, 4))}, torch.tensor(2.0), "hidden")
        ... finally:
        ...     dist.destroy_process_group()
        >>> data["layer:0"][1].shape, float(loss)
        (torch.Size([3, 4]), 2.0)
    """
    dist = torch.distributed
    gathered = {}
    for spec, (H, G) in data.items():
        H_all = gather_rows(H.contiguous())
        G_all = G if gradient == "weight" else gather_rows(G.contiguous())
        gathered[spec] = (H_all, G_all)
    device = next(iter(data.values()))[0].device
    local = torch.tensor([math.nan if loss is None else float(loss)], dtype=torch.float64, device=device)
    losses = [torch.zeros_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(losses, local)
    if dist.get_rank() != 0:
        return None, None
    stacked = torch.cat(losses)
    mean_loss = None if bool(torch.isnan(stacked).all()) else stacked[~torch.isnan(stacked)].mean()
    return gathered, mean_loss
