"""The bench's Triton kernel (tilec/benchmarking/triton_kernel.py) run on the CPU without
Triton: its body is plain Python over ``tl``, so a numpy stand-in of the few ``tl`` functions it
calls (pointers as a flat array plus element offsets, masked loads and stores) runs it program
by program, launched through the module's own ``triton_matmul`` / ``triton_matmul_bias_gelu``.
This checks the kernel's indexing, masks, grouped order and both epilogues against float64 at
ragged sizes; Triton's compilation of it is the GPU test's (tests/gpu/test_triton_kernel_gpu.py).
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tilec.benchmarking import triton_kernel


class Block(np.ndarray):
    """A numpy array with Triton's ``.to(dtype)``."""

    def to(self, dtype: Any) -> "Block":
        return self.astype(dtype).view(Block)


def block(values: Any) -> Block:
    return np.asarray(values).view(Block)


class Pointer:
    """A tensor argument, or pointers into it: its flat storage and element offsets."""

    def __init__(self, flat: np.ndarray, offsets: Any = 0) -> None:
        self.flat, self.offsets = flat, offsets
        self.dtype = SimpleNamespace(element_ty=flat.dtype)

    def __add__(self, offsets: Any) -> "Pointer":
        return Pointer(self.flat, self.offsets + offsets)


def load(pointer: Pointer, mask: Any, other: float) -> Block:
    offsets = np.broadcast_to(pointer.offsets, np.shape(mask))
    safe = np.where(mask, offsets, 0)  # masked-off offsets may lie past the tensor
    return block(np.where(mask, pointer.flat[safe], other).astype(pointer.flat.dtype))


def store(pointer: Pointer, values: Any, mask: Any) -> None:
    offsets = np.broadcast_to(pointer.offsets, np.shape(mask))
    values = np.broadcast_to(np.asarray(values), np.shape(mask))
    assert values.dtype == pointer.flat.dtype, "stores convert to C's dtype first"
    pointer.flat[offsets[mask]] = values[mask]


def dot(x: Block, y: Block, input_precision: str = "tf32") -> Block:
    return block(x.astype(np.float32) @ y.astype(np.float32))


FAKE_TL = SimpleNamespace(
    float32=np.float32, cdiv=lambda a, b: -(-a // b),
    arange=lambda start, end: block(np.arange(start, end)),
    zeros=lambda shape, dtype: block(np.zeros(shape, dtype)),
    load=load, store=store, dot=dot,
    math=SimpleNamespace(erf=lambda x: block(np.vectorize(math.erf, otypes=[x.dtype])(x))))


class Tensor:
    """What the launch functions read of a torch tensor: shape, element strides, the data."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.shape = array.shape

    def stride(self, dim: int) -> int:
        return self.array.strides[dim] // self.array.itemsize

    def storage(self) -> np.ndarray:
        """The array's memory, flat, in the order its strides count elements in (a view: the
        kernel's stores reach the array)."""
        flat = self.array.ravel(order="K")
        assert np.shares_memory(flat, self.array)
        return flat


class Launcher:
    """``kernel[grid](*args, **meta)`` as Triton launches it: every program in turn."""

    def __init__(self, programs: list[int]) -> None:
        self.programs = programs

    def __getitem__(self, grid: tuple[int]):
        def launch(*args: Any, num_stages: int, num_warps: int, **meta: Any) -> None:
            pointers = [Pointer(a.storage()) if isinstance(a, Tensor) else a for a in args]
            for pid in range(grid[0]):
                FAKE_TL.program_id = lambda axis, pid=pid: pid
                triton_kernel._triton_matmul_kernel(*pointers, **meta)
                self.programs.append(pid)
        return launch


@pytest.fixture
def programs(monkeypatch) -> list[int]:
    launched: list[int] = []
    monkeypatch.setattr(triton_kernel, "tl", FAKE_TL)
    monkeypatch.setattr(triton_kernel, "_TRITON_KERNEL", Launcher(launched))
    return launched


CONFIG = (16, 8, 8, 2, 4)  # (BM, BN, BK, stages, warps): ragged edges everywhere below


def operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float16),
            rng.standard_normal((k, n)).astype(np.float16))


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (37, 29, 21), (150, 70, 9)])
def test_the_plain_matmul_runs_every_program_and_writes_every_output(m, n, k, programs):
    a, b = operands(m, n, k, seed=m)
    c = np.full((m, n), np.nan, np.float32)
    triton_kernel.triton_matmul(Tensor(a), Tensor(b), Tensor(c), CONFIG)
    assert sorted(programs) == list(range(-(-m // 16) * -(-n // 8)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_the_plain_matmul_reads_strided_operands(programs):
    """B as the transpose of a row-major [N, K] (element strides (1, K)), C f16."""
    a, b = operands(40, 24, 17, seed=1)
    c = np.full((40, 24), np.nan, np.float16)
    triton_kernel.triton_matmul(Tensor(a), Tensor(np.ascontiguousarray(b.T).T), Tensor(c),
                                CONFIG)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert float(np.linalg.norm(c - want) / np.linalg.norm(want)) < 1e-3


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (37, 29, 21)])
def test_bias_gelu_is_the_epilogue_of_the_same_kernel(m, n, k, programs):
    a, b = operands(m, n, k, seed=k)
    bias = np.random.default_rng(0).standard_normal(n).astype(np.float16)
    c = np.full((m, n), np.nan, np.float16)
    triton_kernel.triton_matmul_bias_gelu(Tensor(a), Tensor(b), Tensor(bias), Tensor(c), CONFIG)
    x = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
    want = 0.5 * x * np.vectorize(math.erfc)(-x / math.sqrt(2.0))
    assert not np.isnan(c).any()
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=2e-3, atol=2e-3)
