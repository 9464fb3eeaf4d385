"""Operand packing on the GPU: ragged matmuls whose operand rows are not 16-byte aligned are
packed at launch and checked against a float64 reference (f16 and bf16, B plain and
transposed); the launch says what it packed and reads fresh operand data on every call;
``pack="off"`` is still right; and the pack kernel itself (1-, 2- and 4-byte elements, both
backends' kernels), its scratch compared element by element, zero padding included; and the
converting pack kernel (i8, f8e4m3, f8e5m2 to f16 and bf16) on every byte value, bit for bit
against tests/pack_convert_reference.py."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.options import target_arch
from tilec.launch.packing import (SCRATCH_POOL, PackPlan, Packer, _pack_tensor, owned_scratch,
                                  plan_packing, row_major_launch)
from tilec.runtime import (DeviceBuffer, as_array_arg, current_device, gpu_unavailable_reason,
                           has_gpu, synchronize)
from tilec.runtime.arrays import c_strides, from_bf16_bits, to_bf16_bits

from tests.pack_convert_reference import assert_converted, every_byte

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2}
# Every operand's rows are 2-byte aligned (odd K, odd N) and large enough for "auto".
SHAPES = [(257, 263, 135), (1000, 1003, 77)]


def sample(name: str, dtype: str = "f16"):
    """The sample with every f16 of its source read as ``dtype``."""
    path = SAMPLES / f"{name}.py"
    text = re.sub(r"\bf16\b", dtype, path.read_text())
    (function,) = load_file(path, text=text).values()
    return function


def operand(rng, shape, dtype: str):
    """(the host array tilec takes, its values in float64)."""
    values = rng.standard_normal(shape, dtype=np.float32)
    if dtype == "f16":
        array = values.astype(np.float16)
        return array, array.astype(np.float64)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = to_bf16_bits(values)
    return bits.view(ml_dtypes.bfloat16), from_bf16_bits(bits).astype(np.float64)


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    assert not np.isnan(out).any(), "some outputs were never written"
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30))


class DeviceArray:
    """Device memory holding ``storage``, seen through __cuda_array_interface__ as any view
    of it: a shape, element strides and an element offset (strided or misaligned arrays)."""

    def __init__(self, storage: np.ndarray, shape=None, strides=None, offset: int = 0):
        self.storage = np.ascontiguousarray(storage)
        self.buffer = DeviceBuffer(self.storage.nbytes)
        self.buffer.copy_from_host(self.storage)
        self.shape = tuple(self.storage.shape if shape is None else shape)
        self.strides = tuple(c_strides(self.shape) if strides is None else strides)
        self.offset = offset
        itemsize = self.storage.itemsize
        self.__cuda_array_interface__ = {
            "shape": self.shape, "typestr": self.storage.dtype.str, "version": 3,
            "data": (self.buffer.ptr + offset * itemsize, False),
            "strides": tuple(s * itemsize for s in self.strides)}

    def upload(self, storage: np.ndarray) -> None:
        self.storage[...] = storage
        self.buffer.copy_from_host(self.storage)

    def values(self) -> np.ndarray:
        """The view's elements as float64, read back from the device."""
        synchronize()
        self.buffer.copy_to_host(self.storage)
        flat = self.storage.reshape(-1)[self.offset:]
        itemsize = self.storage.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat, self.shape, tuple(s * itemsize for s in self.strides))
        return view.astype(np.float64)


def nan_output(m: int, n: int) -> DeviceArray:
    return DeviceArray(np.full((m, n), np.nan, np.float32))


SENTINEL = np.float16(-7.0)


def sentinel_framed_c(m: int, n: int) -> DeviceArray:
    """An f16 C starting one element into its buffer, rows of an odd stride (alternately
    4-byte aligned); the element before C and the columns past N hold SENTINEL, which
    :func:`assert_only_c_written` checks survived."""
    stride = n + 2 if n % 2 else n + 1
    return DeviceArray(np.full(m * stride + 1, SENTINEL, np.float16), shape=(m, n),
                       strides=(stride, 1), offset=1)


def assert_only_c_written(c: DeviceArray) -> None:
    (m, n), (stride, _) = c.shape, c.strides
    written = c.storage.copy()
    c.buffer.copy_to_host(written)
    assert written[0] == SENTINEL
    assert (written[1:].reshape(m, stride)[:, n:] == SENTINEL).all()


# ------------------------------------------------------------------ matmuls, packed

@pytest.mark.parametrize("name", ["matmul", "matmul_bt"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ragged_host_operands_are_packed_and_right(name, dtype, shape):
    m, n, k = shape
    function = sample(name, dtype)
    packing, _ = row_major_launch(function.lower(), {"M": m, "N": n, "K": k}, "auto", ("C",))
    assert packing.names == ("A", "B")
    rng = np.random.default_rng(1)
    a, a64 = operand(rng, (m, k), dtype)
    b, b64 = operand(rng, (n, k) if name == "matmul_bt" else (k, n), dtype)
    ref = a64 @ (b64.T if name == "matmul_bt" else b64)
    SCRATCH_POOL.clear()
    for _ in range(2):
        c = np.full((m, n), np.nan, np.float32)
        function(a, b, c, device="gpu")
        assert rel_error(c.astype(np.float64), ref) < TOLERANCE[dtype]
        # The scratch went back to the pool, and the second call reused it.
        assert sorted(SCRATCH_POOL.sizes()) == sorted(p.nbytes for p in packing.tensors)


def test_prepared_launch_packs_says_so_and_repacks_each_call():
    m, n, k = 257, 263, 135
    rng = np.random.default_rng(2)
    a = DeviceArray(rng.standard_normal((m, k)).astype(np.float16))
    b = DeviceArray(rng.standard_normal((k, n)).astype(np.float16))
    c = nan_output(m, n)
    launch = sample("matmul").prepare(a, b, c)
    assert launch.packing.describe() == ["A packed to stride 192 (rows were 2-byte aligned)",
                                         "B packed to stride 320 (rows were 2-byte aligned)",
                                         "K padded to 160 with zeros"]
    assert [o.vec for o in launch.compiled.kernel.schedule.tiling.operands] == [8, 8]
    # K = 160 divides BK: the copies keep only their M and N edge masks.
    assert sorted({tuple(op.attrs["masked"]) for op in launch.compiled.kernel.walk()
                   if op.name == "copy.global_to_shared"}) == [(False, True), (True, False)]
    # Scratch full of NaN: the padded K must be zeros written by the pack kernel itself
    # (NaN * 0 is NaN), and the zero columns of A too.
    for name in "AB":
        launch.packer.args[name].keepalive.memset_d8(0xFF)
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]
    # New operand data, same launch: the pack kernels run again and the product follows.
    a.upload(rng.standard_normal((m, k)).astype(np.float16))
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]


def test_an_n_major_b_off_128_byte_lines_is_repacked_on_sm_90a():
    """B [K, N] with N = 1000: rows 2000 bytes apart, 16-byte aligned (TMA could read them
    in place) but not whole 128-byte lines; re-read by 4096 rows of A, so "auto" repacks it
    to a 1024-element pitch (tilec/launch/packing.py, repitch) and the product follows."""
    if current_device().compute_capability != (9, 0):
        pytest.skip("the TMA path (sm_90a) needs compute capability 9.0")
    m, n, k = 4096, 1000, 256
    rng = np.random.default_rng(4)
    a = DeviceArray(rng.standard_normal((m, k)).astype(np.float16))
    b = DeviceArray(rng.standard_normal((k, n)).astype(np.float16))
    c = nan_output(m, n)
    launch = sample("matmul").prepare(a, b, c, arch="sm_90a", BM=128, BN=256, BK=64,
                                      stages=3)
    assert launch.packing.describe() == [
        "B packed to stride 1024 (rows 2000 bytes apart, not whole 128-byte lines)"]
    assert "cp.async.bulk.tensor" in launch.compiled.ptx
    launch.packer.args["B"].keepalive.memset_d8(0xFF)  # the padding is never read
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]
    b.upload(rng.standard_normal((k, n)).astype(np.float16))
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]


@pytest.mark.parametrize("m, tile, packed", [
    (4096, dict(BM=128, BN=128, BK=64, stages=4), False),
    (4104, dict(BM=256, BN=128, BK=64, stages=3, warpgroup_rows=128), False),  # odd M tiles
    (8192, dict(BM=128, BN=256, BK=64, stages=3), True),
], ids=["128x128", "256x128", "128x256-8192-rows"])
def test_a_cluster_reads_a_b_off_128_byte_lines_in_place_below_8192_rows(m, tile, packed):
    """The bench's schedules for such a B (N = 1000): clusters of two persistent blocks
    multicast each B box, so "auto" leaves B in place below twice PITCH_MIN_ROWS rows of A;
    the product follows either way."""
    if current_device().compute_capability != (9, 0):
        pytest.skip("the TMA path (sm_90a) needs compute capability 9.0")
    n, k = 1000, 512
    rng = np.random.default_rng(5)
    a = DeviceArray(rng.standard_normal((m, k)).astype(np.float16))
    b = DeviceArray(rng.standard_normal((k, n)).astype(np.float16))
    c = nan_output(m, n)
    launch = sample("matmul").prepare(a, b, c, arch="sm_90a", persistent=True,
                                      raster_group=16, cluster=2, **tile)
    assert launch.packing.names == (("B",) if packed else ())
    assert launch.compiled.kernel.schedule.roles.cluster == 2
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]


def test_pack_off_copies_elements_and_is_still_right():
    m, n, k = 257, 263, 135
    rng = np.random.default_rng(3)
    a = DeviceArray(rng.standard_normal((m, k)).astype(np.float16))
    b = DeviceArray(rng.standard_normal((k, n)).astype(np.float16))
    c = nan_output(m, n)
    launch = sample("matmul").prepare(a, b, c, pack="off")
    assert not launch.packing
    assert [o.vec for o in launch.compiled.kernel.schedule.tiling.operands] == [1, 1]
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]


def test_column_major_strided_and_offset_operands_are_packed_and_right():
    m, n, k = 300, 264, 135
    rng = np.random.default_rng(4)
    # A column-major with 2-byte aligned columns; B every other column of a wider array.
    a = DeviceArray(rng.standard_normal((k, m)).astype(np.float16), shape=(m, k),
                    strides=(1, m))
    b = DeviceArray(rng.standard_normal((k, 2 * n)).astype(np.float16), shape=(k, n),
                    strides=(2 * n, 2))
    c = nan_output(m, n)
    launch = sample("matmul").prepare(a, b, c)
    # K is the outer dim of both scratches here: 25 zero rows each.
    assert launch.packing.describe() == ["A packed to stride 320 (columns were 8-byte aligned)",
                                         "B packed to stride 320 (no dim had unit stride)",
                                         "K padded to 160 with zeros"]
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]
    # Rows 16-byte aligned, but the array starts one element into its buffer.
    k = 136
    a = DeviceArray(rng.standard_normal(m * k + 1).astype(np.float16), shape=(m, k),
                    strides=(k, 1), offset=1)
    b = DeviceArray(rng.standard_normal((k, n)).astype(np.float16))
    c = nan_output(m, n)
    launch = sample("matmul").prepare(a, b, c)
    # B is aligned and not packed, so K stays 136 (B's rows past it are not zeros).
    assert launch.packing.describe() == [
        "A packed to stride 192 (its address was 2-byte aligned)"]
    launch()
    assert rel_error(c.values(), a.values() @ b.values()) < TOLERANCE["f16"]


def test_an_empty_grid_packs_and_launches_nothing():
    a = DeviceArray(np.zeros((0, 135), np.float16))
    b = DeviceArray(np.ones((135, 263), np.float16))  # misaligned and large: would be packed
    c = DeviceArray(np.zeros((0, 263), np.float32))
    launch = sample("matmul").prepare(a, b, c)
    assert launch.empty and not launch.packing
    launch()
    synchronize()


# -------------------------------------------------------------------- the pack kernel

@pytest.mark.parametrize("dtype, col_stride, grid_y, offset, src_row_stride, zero_rows", [
    # Contiguous rows of odd stride: every 2-byte (f16) or 4-byte (f32) skew of a row's
    # start within its 16-byte chunk occurs.
    (np.float16, 1, None, 0, 251, 0),
    (np.float32, 1, None, 0, 251, 0),
    (np.float16, 1, None, 3, 251, 0),  # the first row starts misaligned too
    # Rows that fill the storage to its last element: the last vector's second chunk ends
    # the buffer.
    (np.float16, 1, None, 1, 77, 0),
    (np.float16, 3, None, 0, 251, 0),  # a strided source: scalar loads at any element stride
    (np.float16, 1, 1, 0, 251, 0),     # one block row in the grid: each thread loops over rows
    # Rows past the source's (a reduction dim padded to whole K steps), both paths, and
    # with threads looping over rows.
    (np.float16, 1, None, 0, 251, 27),
    (np.float32, 3, None, 0, 251, 27),
    (np.float16, 1, 1, 3, 251, 27),
    # 1-byte elements (int8, fp8 bits): every byte skew of a row's start, the first row
    # misaligned, the storage's last byte, strided, looping rows, padded rows.
    (np.int8, 1, None, 0, 251, 0),
    (np.int8, 1, None, 5, 251, 0),
    (np.int8, 1, None, 1, 77, 0),
    (np.int8, 3, None, 0, 251, 0),
    (np.int8, 1, 1, 7, 251, 27),
    (np.int8, 3, None, 0, 251, 27),
])
@pytest.mark.parametrize("backend", ["ptx", "llvm"])
def test_pack_kernel_copies_rows_and_zero_fills_the_padding(dtype, col_stride, grid_y, offset,
                                                            src_row_stride, zero_rows, backend):
    rows, cols = 37, 77
    rng = np.random.default_rng(5)
    # The view starts `offset` elements in and its last row ends where its storage does.
    if dtype == np.int8:  # never 0 or -1: neither a missed copy nor the 0xFF fill passes
        storage = rng.integers(1, 127, offset + rows * src_row_stride).astype(dtype)
    else:
        storage = rng.standard_normal(offset + rows * src_row_stride).astype(dtype)
    source = DeviceArray(storage, shape=(rows, cols), strides=(src_row_stride, col_stride),
                         offset=offset)
    name = {np.float16: "f16", np.float32: "f32", np.int8: "i8"}[dtype]
    tensor = as_array_arg(source, "A", name, 2)
    packing = plan_packing(sample("matmul").lower(), {"A": tensor}, "always")
    (packed,) = packing.tensors
    if zero_rows:
        packed = packed.padded(packed.outer, rows + zero_rows)
        packing = PackPlan((packed,))
    per_line = 128 // storage.itemsize  # scratch rows start on 128-byte lines
    assert packed.row_stride == -(-cols // per_line) * per_line
    out, packer, scratch = pack_and_read(packing, tensor, backend, grid_y, dtype)
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[storage.itemsize]
    expected = np.lib.stride_tricks.as_strided(
        storage[offset:], (rows, cols), (src_row_stride * storage.itemsize,
                                 col_stride * storage.itemsize))
    assert np.array_equal(out[:rows, :cols].view(bits), expected.view(bits))
    assert not out[:rows, cols:].view(bits).any()  # the padding is zeros
    assert not out[rows:].view(bits).any()  # and so are the rows past the source's
    # The matmul is handed the scratch with its padded stride.
    assert packer.args["A"].ptr == scratch["A"].ptr
    assert packer.args["A"].strides == (packed.row_stride, 1)


def pack_and_read(packing, tensor, backend: str, grid_y, dtype):
    """Run the plan's one pack launch into scratch filled with 0xFF bytes (anything the
    kernel leaves unwritten shows up), with ``grid_y`` rows of blocks when given (threads
    then loop over the rows); the scratch read back as ``dtype``, the Packer, the scratch."""
    (packed,) = packing.tensors
    scratch = owned_scratch(packing)
    scratch[packed.name].memset_d8(0xFF)
    packer = Packer(packing, {packed.name: tensor},
                    target_arch(current_device().compute_capability), scratch, backend)
    if grid_y is not None:
        grid = packer.launches[0].grid
        packer.launches[0] = dataclasses.replace(packer.launches[0],
                                                 grid=(grid[0], grid_y, 1))
    packer.launch()
    synchronize()
    out = np.empty((packed.rows, packed.row_stride), dtype)
    scratch[packed.name].copy_to_host(out)
    return out, packer, scratch


@pytest.mark.parametrize("source", ["i8", "f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("dest", ["f16", "bf16"])
@pytest.mark.parametrize("col_stride, grid_y, offset, src_row_stride, zero_rows", [
    (1, None, 0, 77, 0),    # contiguous: 77-byte rows start at every skew of a chunk
    (1, None, 5, 83, 27),   # the first row misaligned, 27 zero rows (a padded K)
    (1, 1, 3, 77, 27),      # one block row in the grid: threads loop over the rows
    (3, None, 0, 251, 0),   # strided columns
    (3, None, 1, 251, 9),
])
@pytest.mark.parametrize("backend", ["ptx", "llvm"])
def test_converting_pack_kernel_is_exact_on_every_byte(source, dest, col_stride, grid_y, offset,
                                                      src_row_stride, zero_rows, backend):
    """W (1-byte elements) packed into an f16 or bf16 scratch: each of the 256 byte values
    (NaNs, e5m2's infinities, subnormals, -0) converted exactly, zeros past the 77 columns
    (not a multiple of 8) and in the rows past the source's; with the llvm backend the
    launch runs the PTX backend's converting kernel."""
    rows, cols = 37, 77
    rng = np.random.default_rng(11)
    # The view starts `offset` bytes in and its last row ends where its storage does.
    storage = rng.integers(0, 256, offset + rows * src_row_stride).astype(np.uint8)
    values = every_byte((rows, cols), seed=col_stride + offset)
    view = np.lib.stride_tricks.as_strided(storage[offset:], (rows, cols),
                                           (src_row_stride, col_stride))
    view[...] = values
    device = DeviceArray(storage.view(np.int8) if source == "i8" else storage,
                         shape=(rows, cols), strides=(src_row_stride, col_stride), offset=offset)
    tensor = as_array_arg(device, "W", source, 2)
    packed = _pack_tensor(tensor, "always").converting(dest)  # 77-byte rows: packed
    if zero_rows:
        packed = packed.padded(packed.outer, rows + zero_rows)
    assert packed.row_stride == 128 and packed.rows == rows + zero_rows  # 77 -> 2 lines
    packing = PackPlan((packed,))
    # 0xFFFF is a NaN in f16 and bf16: anything left unwritten shows up.
    out, packer, _ = pack_and_read(packing, tensor, backend, grid_y, np.uint16)
    assert_converted(out, values, packed, source, dest)
    assert packer.args["W"].dtype == dest and packer.args["W"].strides == (128, 1)
