"""The global memory a split-K kernel's blocks meet in (``backend/split.py``), and a
stream-K kernel's (``tilec/families/stream_k.py``: a part slot and a flag per block, flags
set back to zero by the block that reads the part).

A workspace is two device buffers: the partial sums (4-byte f32 or i32 words, one block tile
per output tile and slice) and one u32 counter per output tile. The counters are zeroed when
the buffer is made, and every launch leaves them zero again (the last block of a tile resets
its counter), so a workspace is reused without a memset per launch. Two launches must not
share one at the same time: a prepared launch owns its workspace; plain calls, which run on
the legacy default stream one after another, share one per size (:func:`shared_workspace`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from tilec.backend.abi import WORKSPACE_SOURCES
from tilec.backend.split import PARTIAL_BYTES
from tilec.ir.core import Kernel
from tilec.launch.binding import launch_grid, whole_cluster_tiles

COUNTER_BYTES = 4
SHARED_LIMIT = 4  # workspaces kept for plain calls (the most recently used)


@dataclass(frozen=True)
class WorkspaceSize:
    partial_bytes: int
    counter_bytes: int


def workspace_size(compiled_kernel: Kernel, sizes: Sequence[int],
                   multiprocessors: Optional[int] = None) -> Optional[WorkspaceSize]:
    """What a launch of the compiled kernel over ``sizes`` (its tile axes) needs; None for a
    kernel without split-K or stream-K. A stream-K kernel's depends on its grid, one block
    per SM (``multiprocessors``: the current device's where not given)."""
    splits = compiled_kernel.schedule.splits
    plan = compiled_kernel.schedule.tiling
    # A cluster's M tiles in whole clusters: a pair's block past M has a slot too.
    tiles = whole_cluster_tiles(sizes, compiled_kernel)
    block_elements = plan.block[0] * plan.block[1]
    roles = compiled_kernel.schedule.roles
    if roles is not None and roles.stream_k:
        # One part slot and one flag per block of the persistent grid: a block stores at
        # most one part (tilec/families/stream_k.py).
        if multiprocessors is None:
            from tilec.runtime import current_device
            multiprocessors = current_device().multiprocessor_count
        blocks = launch_grid(list(sizes), compiled_kernel, multiprocessors)[0]
        return WorkspaceSize(blocks * block_elements * PARTIAL_BYTES, blocks * COUNTER_BYTES)
    if splits == 1:
        return None
    return WorkspaceSize(tiles * splits * block_elements * PARTIAL_BYTES, tiles * COUNTER_BYTES)


class Workspace:
    def __init__(self, size: WorkspaceSize):
        from tilec.runtime import DeviceBuffer
        self.size = size
        self.partials = DeviceBuffer(size.partial_bytes)
        self.counters = DeviceBuffer(size.counter_bytes)
        self.counters.memset_d8(0)

    @property
    def args(self) -> dict[str, Any]:
        """The hidden kernel arguments, by their ABI source keys."""
        return dict(zip(WORKSPACE_SOURCES, (self.partials, self.counters)))


_shared: dict[WorkspaceSize, Workspace] = {}
_lock = threading.Lock()


def shared_workspace(size: WorkspaceSize) -> Workspace:
    """The workspace plain calls of this size share (made on first use)."""
    with _lock:
        workspace = _shared.pop(size, None) or Workspace(size)
        _shared[size] = workspace  # most recently used last
        while len(_shared) > SHARED_LIMIT:
            del _shared[next(iter(_shared))]
        return workspace
