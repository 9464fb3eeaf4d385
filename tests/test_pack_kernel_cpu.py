"""The pack kernel's emitted PTX (backend/pack.py's, and the llvm backend's twin through
LLVM) run on the CPU through a model of the
instructions it uses (tests/pack_kernel_model.py), thread by thread, with the arguments the
launcher passes (tilec.launch.packing.pack_launch): 1-, 2- and 4-byte elements, source rows
at every byte offset within a 16-byte chunk, strided columns, a padded reduction dim, and the
last row read element by element (no aligned chunk reaches past the source's last byte: the
model refuses such a load). tests/gpu/test_packing_gpu.py runs it on a GPU.

The converting kernel (backend/pack.py's convert_ptx: i8, f8e4m3, f8e5m2 to f16, bf16) runs
the same way on every one of the 256 byte values, against the exact values
(tilec.target.fp8's decode table, numpy's int8)."""
from __future__ import annotations

import numpy as np
import pytest

from tilec.backend.pack import DESTINATIONS, SOURCES, convert_ptx, pack_ptx
from tilec.launch.packing import _pack_tensor, pack_launch
from tilec.runtime.arrays import ArrayArg

from tests.pack_convert_reference import assert_converted, converted_bits, every_byte
from tests.pack_kernel_model import Memory, launch

SRC, DST = 0x100000, 0x800000  # 16-byte aligned (the scratch's is 256)
DTYPES = {1: ("i8", np.uint8), 2: ("f16", np.uint16), 4: ("f32", np.uint32)}


def kernel_ptx(itemsize: int, backend: str, convert=None) -> str:
    if convert is not None:  # (source, destination): the PTX backend's, for either backend
        return convert_ptx(*convert, "sm_80")
    if backend == "llvm":
        pytest.importorskip("llvmlite")
        from tilec.backend.llvm.pack import pack_ptx as llvm_pack_ptx
        return llvm_pack_ptx(itemsize, "sm_80")
    return pack_ptx(itemsize, "sm_80")


def run_pack(source: np.ndarray, itemsize: int, skew: int = 0, strides=None,
             pad_rows: int = 0, backend: str = "ptx", convert=None) -> tuple[np.ndarray, object]:
    """Pack ``source`` (element bits; its rows ``strides`` apart, in elements) placed
    ``skew`` bytes past a 16-byte boundary; the scratch as a 2-D array of its row stride,
    and the plan's entry. ``convert``: (source dtype, scratch dtype) of a converting pack
    of 1-byte elements; the scratch is then 16-bit words."""
    rows, cols = source.shape
    strides = strides or (cols, 1)
    name, bits = DTYPES[itemsize] if convert is None else (convert[0], np.uint8)
    span = (rows - 1) * strides[0] + (cols - 1) * strides[1] + 1
    flat = np.zeros(span, bits)
    for r in range(rows):
        flat[r * strides[0] + np.arange(cols) * strides[1]] = source[r]
    arg = ArrayArg(name=name, ptr=SRC + skew, dtype=name, shape=(rows, cols),
                   strides=tuple(strides), device=0)
    packed = _pack_tensor(arg, "always")
    assert packed is not None and packed.inner == 1
    if convert is not None:
        packed = packed.converting(convert[1])
    if pad_rows:
        packed = packed.padded(0, rows + pad_rows)
    memory = Memory()
    start = SRC + skew
    # From the 16-byte granule the source starts in (a misaligned tensor is a view inside
    # an allocation, which starts 256-byte aligned) to its exact last byte (which may be its
    # allocation's: compute-sanitizer's memcheck refuses a read past it); the bytes before
    # it a marker that must never be copied.
    lo, hi = start // 16 * 16, start + span * itemsize
    region = bytearray(b"\xa5" * (hi - lo))
    region[start - lo:start - lo + span * itemsize] = flat.tobytes()
    memory.add(lo, bytes(region))
    memory.add(DST, bytes(b"\x5a" * packed.nbytes))
    from unittest import mock
    with mock.patch("tilec.launch.packing.pack_function", lambda size, arch: "ptx"), \
            mock.patch("tilec.launch.packing.llvm_pack_function", lambda size, arch: "llvm"), \
            mock.patch("tilec.launch.packing.convert_function", lambda s, d, arch: "convert"):
        plan = pack_launch(packed, arg, DST, "sm_80", backend)
    assert plan.function == ("convert" if convert else backend)
    params = dict(zip(("src", "dst", "rows", "src_rows", "cols", "src_row_stride",
                       "src_col_stride", "dst_row_stride"), map(int, plan.args)))
    launch(kernel_ptx(itemsize, backend, convert), plan.grid, plan.block, params, memory)
    out = np.frombuffer(bytes(memory.regions[DST]), bits if convert is None else np.uint16)
    return out.reshape(packed.rows, packed.row_stride), packed


def expected(source: np.ndarray, packed) -> np.ndarray:
    want = np.zeros((packed.rows, packed.row_stride), source.dtype)
    want[:source.shape[0], :source.shape[1]] = source
    return want


def bits(shape, itemsize: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Never zero: a zero left by a missed copy would look like a copied one.
    return rng.integers(1, 1 << (8 * itemsize), size=shape, dtype=np.uint64).astype(
        DTYPES[itemsize][1])


BACKENDS = pytest.mark.parametrize("backend", ["ptx", "llvm"])


@BACKENDS
@pytest.mark.parametrize("itemsize, skew", [(size, skew) for size in (1, 2, 4)
                                             for skew in range(0, 16, size)])
def test_contiguous_rows_at_every_byte_offset(itemsize, skew, backend):
    cols = {1: 77, 2: 45, 4: 21}[itemsize]  # rows that are not 16-byte multiples
    source = bits((3, cols), itemsize, seed=skew)
    out, packed = run_pack(source, itemsize, skew, backend=backend)
    assert packed.row_stride * itemsize % 128 == 0
    np.testing.assert_array_equal(out, expected(source, packed))


@BACKENDS
@pytest.mark.parametrize("itemsize", [1, 2, 4])
def test_strided_columns_and_zero_rows_of_a_padded_k(itemsize, backend):
    source = bits((4, 19), itemsize, seed=itemsize)
    # Column-strided rows: element stride 3, row stride 61 (odd: any alignment).
    out, packed = run_pack(source, itemsize, strides=(61, 3), pad_rows=5, backend=backend)
    assert packed.rows == 9
    np.testing.assert_array_equal(out, expected(source, packed))


@BACKENDS
def test_a_row_shorter_than_a_vector_and_a_vector_past_the_row(backend):
    source = bits((2, 3), 1, seed=7)  # 3 bytes a row: one vector, 13 of its bytes zeros
    # the 3 bytes straddle a 16-byte boundary
    out, packed = run_pack(source, 1, skew=13, backend=backend)
    np.testing.assert_array_equal(out, expected(source, packed))


# ---------------------------------------------------------------- the converting kernel

CONVERSIONS = [(source, dest) for source in SOURCES for dest in DESTINATIONS]


def test_the_reference_is_exact_and_has_the_specials():
    e4m3 = converted_bits(np.arange(256, dtype=np.uint8), "f8e4m3", "f16")
    assert e4m3[0x7E] == 0x5F00 and e4m3[0x01] == 0x1800  # 448 and 2**-9 (a subnormal)
    assert e4m3[0x80] == 0x8000 and e4m3[0x7F] == e4m3[0xFF] == 0x7FFF  # -0, NaN
    e5m2 = converted_bits(np.arange(256, dtype=np.uint8), "f8e5m2", "f16")
    finite = ~np.isin(np.arange(256), [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF])
    assert np.array_equal(e5m2[finite], (np.arange(256) << 8)[finite])  # e5m2: f16's top byte
    i8 = converted_bits(np.arange(256, dtype=np.uint8), "i8", "bf16")
    assert i8[0x80] == 0xC300 and i8[0x7F] == 0x42FE  # -128 and 127


@pytest.mark.parametrize("source, dest", CONVERSIONS)
@pytest.mark.parametrize("skew", [0, 5, 8, 13])
def test_converting_every_byte_value_at_byte_offsets(source, dest, skew):
    # 37 bytes a row: not a multiple of 8 (the last vector part zeros), 8 rows = 296 bytes.
    source_bytes = every_byte((8, 37), seed=skew)
    out, packed = run_pack(source_bytes, 1, skew, convert=(source, dest))
    assert packed.row_stride == 64 and packed.scratch_dtype == dest  # a 128-byte line of f16
    assert_converted(out, source_bytes, packed, source, dest)


@pytest.mark.parametrize("source, dest", CONVERSIONS)
def test_converting_strided_columns_and_zero_rows_of_a_padded_k(source, dest):
    source_bytes = every_byte((13, 21), seed=3)
    # Column-strided rows (element stride 3, row stride 67), and 4 zero rows after them.
    out, packed = run_pack(source_bytes, 1, skew=1, strides=(67, 3), pad_rows=4,
                           convert=(source, dest))
    assert packed.rows == 17
    assert_converted(out, source_bytes, packed, source, dest)


def test_converting_a_row_shorter_than_a_vector_across_a_chunk_boundary():
    source_bytes = every_byte((86, 3), seed=9)  # 3 bytes a row, straddling 8-byte chunks
    out, packed = run_pack(source_bytes, 1, skew=7, convert=("f8e4m3", "bf16"))
    assert_converted(out, source_bytes, packed, "f8e4m3", "bf16")


@pytest.mark.parametrize("backend", ["ptx", "llvm"])
def test_a_converting_launch_runs_the_ptx_backends_kernel_with_either_backend(backend):
    # run_pack runs the kernel pack_launch's plan is for; the llvm backend has no converting
    # kernel, so both backends' launches take convert_function's, with the same arguments.
    source_bytes = every_byte((16, 40), seed=1)
    out, packed = run_pack(source_bytes, 1, skew=3, backend=backend, convert=("i8", "f16"))
    assert_converted(out, source_bytes, packed, "i8", "f16")
