"""TMA tensor maps at launch, on the CPU: TMA's rules checked before the driver with messages
that name the operand, the rule and the value; the driver's encode call as cuda.bindings wants
it (a fake driver records it); and the "tensor_map" role filling an sm_90a kernel's blob
parameters, through kernel_arguments and the launch's parameter marshalling."""
from __future__ import annotations

import ctypes
import re
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from tilec.backend.abi import TENSOR_MAP
from tilec.backend.signature import kernel_abi
from tilec.kernel import PreparedLaunch, launch_compiled, load_file
from tilec.launch import tensor_maps
from tilec.launch.binding import Bound, kernel_arguments, spec_for
from tilec.launch.tensor_maps import TensorMapLayout, tensor_map_argument, tensor_map_layout
from tilec.runtime import driver
from tilec.runtime.arrays import ArrayArg, c_strides
from tilec.runtime.driver import BlobArg, CudaError, Function, GpuUnavailableError

bindings = pytest.importorskip("cuda.bindings.driver")

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
HOPPER = dict(arch="sm_90a", stages=4, BM=128, BN=256, BK=64)
BASE = 1 << 20  # a 16-byte aligned device address


def array(name, shape, strides=None, ptr=BASE, dtype="f16") -> ArrayArg:
    """A device array as binding describes it (strides in elements; row-major by default)."""
    strides = c_strides(shape) if strides is None else strides
    return ArrayArg(name, ptr, dtype, tuple(shape), tuple(strides), device=0)


# -- TMA's rules ------------------------------------------------------------------------------

def test_a_row_major_operand_maps_with_its_rows_inner():
    layout = tensor_map_layout("A", array("A", (1000, 80)), (64, 128), 128)
    assert layout == TensorMapLayout("A", "f16", BASE, (80, 1000), 160, (64, 128), 128)


@pytest.mark.parametrize("dtype", ["i8", "f8e4m3", "f8e5m2"])
def test_an_8_bit_operand_maps_128_elements_a_swizzle_row(dtype):
    """8-bit operands (the wgmma8 family): a 128-element inner box is the 128-byte span."""
    layout = tensor_map_layout("A", array("A", (1000, 96), dtype=dtype), (128, 128), 128)
    assert layout == TensorMapLayout("A", dtype, BASE, (96, 1000), 96, (128, 128), 128)
    with pytest.raises(ValueError, match="must fit the 128-byte swizzle span"):
        tensor_map_layout("A", array("A", (1000, 96), dtype=dtype), (256, 128), 128)


def test_an_i32_output_maps_32_elements_a_swizzle_row():
    """A TMA-stored i32 C (int8 sums, passes/tma_store.py): a 32-element box is the span;
    rows of N = 1003 (4012 bytes) are not 16-byte aligned, which the pass stores directly."""
    layout = tensor_map_layout("C", array("C", (1000, 1004), dtype="i32"), (32, 128), 128)
    assert layout == TensorMapLayout("C", "i32", BASE, (1004, 1000), 4016, (32, 128), 128)
    with pytest.raises(ValueError, match="must fit the 128-byte swizzle span"):
        tensor_map_layout("C", array("C", (1000, 1004), dtype="i32"), (64, 128), 128)
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        tensor_map_layout("C", array("C", (1000, 1003), dtype="i32"), (32, 128), 128)


def test_a_column_major_operand_maps_with_its_columns_inner():
    # B [K=80, N=1000] stored as the transpose of a row-major [N, K]: dim 0 is contiguous.
    layout = tensor_map_layout("B", array("B", (80, 1000), (1, 96)), (64, 64), 128)
    assert (layout.dims, layout.byte_stride) == ((80, 1000), 192)


def test_a_single_row_gets_a_legal_stride_since_none_is_stepped_along():
    # One row of a ragged matrix: its stride (77 elements, 154 bytes) is never used.
    layout = tensor_map_layout("A", array("A", (1, 77), (77, 1)), (64, 128), 128)
    assert (layout.dims, layout.byte_stride) == ((77, 1), 160)


def test_both_unit_strides_pick_the_last_as_tensor_spec_does():
    # numpy's strides for a [1, 64] array are (64, 1), torch's may be (1, 1).
    layout = tensor_map_layout("A", array("A", (1, 64), (1, 1)), (64, 64), 128)
    assert (layout.dims, layout.byte_stride) == ((64, 1), 128)


ARGUMENT_ERRORS = [
    (dict(ptr=BASE + 8), "the base address must be 16-byte aligned, got 0x100008 (8 bytes past"),
    (dict(shape=(1000, 77)), "the stride of dim 0 must be a multiple of 16 bytes, got 154 bytes "
                             "(77 elements of 2 bytes)"),
    (dict(strides=(2**39, 1)), "the stride of dim 0 must be under 2**40 bytes, got "
                               f"{2**40} bytes"),
    (dict(strides=(160, 2)), "one dim must have unit stride (its elements contiguous), got "
                             "strides (160, 2)"),
    (dict(shape=(2**32, 80)), "each dim must hold from 1 to 2**32 - 1 elements, got dim 0 of "
                              f"{2**32}"),
    (dict(shape=(16, 0)), "each dim must hold from 1 to 2**32 - 1 elements, got dim 1 of 0"),
    (dict(shape=(2, 2, 4, 8)), "a tensor map here is 2-D (3-D for a batch of matrices), got "
                               "a 4-D array of shape (2, 2, 4, 8)"),
    (dict(dtype="f64"), "the dtype must be one of f16, bf16, f32, i8, f8e4m3, f8e5m2, i32, got "
                        "f64"),
]


@pytest.mark.parametrize("change, message", ARGUMENT_ERRORS,
                         ids=[m.split(",")[0][:40] for _, m in ARGUMENT_ERRORS])
def test_each_argument_rule_is_refused_with_the_operand_the_rule_and_the_value(change, message):
    fields = dict(shape=(1000, 80), ptr=BASE, dtype="f16")
    fields.update(change)
    arg = array("A", fields["shape"], change.get("strides"), fields["ptr"], fields["dtype"])
    with pytest.raises(ValueError) as error:
        tensor_map_layout("A", arg, (64, 128), 128)
    text = str(error.value)
    assert text.startswith("TMA operand 'A': ") and message in text
    # What the user can do about it.
    assert 'pack="always"' in text and 'arch="sm_90"' in text and "contiguous" in text


BOX_ERRORS = [
    ((64, 512), 128, "box dims must be from 1 to 256 elements, got box (64, 512)"),
    ((0, 128), 128, "box dims must be from 1 to 256 elements, got box (0, 128)"),
    ((60, 128), 128, "the box's inner extent must be a multiple of 16 bytes, got 60 elements "
                     "of 2 bytes = 120 bytes"),
    ((128, 64), 128, "the box's inner extent must fit the 128-byte swizzle span, got 128 "
                     "elements of 2 bytes = 256 bytes"),
]


@pytest.mark.parametrize("box, swizzle, message", BOX_ERRORS)
def test_a_box_tma_refuses_is_called_a_compiler_error(box, swizzle, message):
    with pytest.raises(ValueError) as error:
        tensor_map_layout("B", array("B", (1000, 80)), box, swizzle)
    assert str(error.value).startswith(f"TMA operand 'B': {message}")
    assert "please report it" in str(error.value)


def test_an_argument_laid_out_otherwise_than_compiled_is_refused():
    column_major = array("A", (1000, 80), (1, 1000))
    with pytest.raises(ValueError, match=r"TMA operand 'A': the kernel was compiled for an array "
                                         r"whose dim 1 has unit stride, got strides \(1, 1000\)"):
        tensor_map_layout("A", column_major, (64, 128), 128, compiled_inner=1)


# -- the driver call ----------------------------------------------------------------------------

class FakeDriver(SimpleNamespace):
    """cuda.bindings' types and enums, with cuTensorMapEncodeTiled and the launches recorded."""

    def __init__(self, result: int = 0) -> None:
        names = ("CUtensorMapDataType", "CUtensorMapInterleave", "CUtensorMapSwizzle",
                 "CUtensorMapL2promotion", "CUtensorMapFloatOOBfill", "cuuint64_t", "cuuint32_t",
                 "CUresult", "CUstream", "CUlaunchConfig", "CUlaunchAttribute",
                 "CUlaunchAttributeID")
        super().__init__(calls=[], result=result, **{n: getattr(bindings, n) for n in names})

    def cuTensorMapEncodeTiled(self, *args):
        self.calls.append(("cuTensorMapEncodeTiled", args))
        tensor_map = bindings.CUtensorMap()
        tensor_map.opaque = [len(self.calls)] * 16  # tells one map from the next
        return (self.result, tensor_map)

    def cuLaunchKernel(self, *args):
        self.calls.append(("cuLaunchKernel", args))
        return (0,)


@pytest.fixture
def fake(monkeypatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(driver, "_cuda", fake)
    monkeypatch.setattr(driver, "has_gpu", lambda: True)
    return fake


def test_the_encode_call_is_made_as_cuda_bindings_wants_it(fake):
    data = driver.encode_tensor_map("bf16", BASE, (80, 1000), (160,), (64, 128), 128)
    [(call, args)] = fake.calls
    dtype, rank, address, dims, strides, box, element_strides = args[:7]
    assert call == "cuTensorMapEncodeTiled" and (rank, address) == (2, BASE)
    assert dtype == bindings.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    # cuda.bindings refuses plain ints in these lists.
    assert all(type(v) is bindings.cuuint64_t for v in (*dims, *strides))
    assert all(type(v) is bindings.cuuint32_t for v in (*box, *element_strides))
    assert [[int(v) for v in values] for values in (dims, strides, box, element_strides)] == [
        [80, 1000], [160], [64, 128], [1, 1]]
    assert args[7:] == (bindings.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                        bindings.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                        bindings.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                        bindings.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    # The map's 128 bytes, copied out of the CUtensorMap.
    assert type(data) is bytes and data == (1).to_bytes(8, "little") * 16


@pytest.mark.parametrize("dtype, name", [("f16", "FLOAT16"), ("f32", "FLOAT32"),
                                         ("i8", "UINT8"), ("f8e4m3", "UINT8"),
                                         ("f8e5m2", "UINT8")])
def test_each_dtype_has_its_tensor_map_type(fake, dtype, name):
    driver.encode_tensor_map(dtype, BASE, (64, 64), (128,), (32, 64), 128, l2_promotion_bytes=128)
    [(_, args)] = fake.calls
    assert args[0] == getattr(bindings.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{name}")
    assert args[9] == bindings.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B


def test_a_driver_refusal_is_a_cuda_error_with_the_drivers_name(fake):
    fake.result = int(bindings.CUresult.CUDA_ERROR_INVALID_VALUE)
    with pytest.raises(CudaError) as error:
        driver.encode_tensor_map("f16", BASE, (80, 1000), (160,), (64, 128), 128,
                                 what="operand 'A'")
    assert error.value.name == "CUDA_ERROR_INVALID_VALUE"
    assert str(error.value).startswith("cuTensorMapEncodeTiled failed: CUDA_ERROR_INVALID_VALUE")
    assert "tensor map of operand 'A': dtype f16, address 0x100000, dims [80, 1000]" in str(
        error.value)


@pytest.mark.parametrize("change, message", [
    (dict(dtype="f64"), "dtype must be one of f16, bf16, f32, i32, i8, f8e4m3, f8e5m2, got "
                        "'f64'"),
    (dict(swizzle_bytes=16), "swizzle must be one of 0, 32, 64, 128, got 16"),
    (dict(l2_promotion_bytes=64), "L2 promotion must be one of 128, 256, got 64"),
    (dict(byte_strides=()), "2 dims need 1 byte strides and 2 box dims, got 0 and 2"),
])
def test_arguments_the_driver_has_no_enum_for_are_refused_first(fake, change, message):
    args = dict(dtype="f16", address=BASE, dims=(80, 1000), byte_strides=(160,), box=(64, 128),
                swizzle_bytes=128)
    args.update(change)
    with pytest.raises(ValueError, match=re.escape(message)):
        driver.encode_tensor_map(**args)
    assert fake.calls == []


def test_encoding_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(driver, "has_gpu", lambda: False)
    with pytest.raises(GpuUnavailableError, match="no usable GPU to encode a tensor map"):
        driver.encode_tensor_map("f16", BASE, (80, 1000), (160,), (64, 128), 128)


# -- the role: an sm_90a kernel's tensor map parameters ----------------------------------------

M, N, K = 256, 320, 192


def compile_for(sample, function, tensors, **options):
    """The sample compiled for sm_90a and the layout of ``tensors``, as a call would."""
    bound = Bound(tensors, {}, {"M": M, "N": N, "K": K})
    fn = load_file(SAMPLES / sample)[function]
    return fn.compile(spec=spec_for(bound), **{**HOPPER, **options}), bound


def row_major_operands():
    return {"A": array("A", (M, K), ptr=0xA0000), "B": array("B", (K, N), ptr=0xB0000),
            "C": array("C", (M, N), ptr=0xC0000, dtype="f32")}


@pytest.fixture
def recorded(monkeypatch):
    """encode_tensor_map replaced: each call recorded, its bytes saying which call it was."""
    calls = []

    def encode(dtype, address, dims, byte_strides, box, swizzle_bytes, **kwargs):
        calls.append((dtype, address, tuple(dims), tuple(byte_strides), tuple(box),
                      swizzle_bytes))
        return bytes([len(calls)]) * 128

    monkeypatch.setattr(driver, "encode_tensor_map", encode)
    return calls


def test_kernel_arguments_fill_each_tensor_map_in_its_abi_position(recorded):
    compiled, bound = compile_for("matmul.py", "matmul", row_major_operands())
    abi = kernel_abi(compiled.kernel)
    args = kernel_arguments(compiled.kernel, bound, bound.tensors)
    maps = [i for i, p in enumerate(abi) if p.role == "tensor_map"]
    assert [abi[i].name for i in maps] == ["A_tensor_map", "B_tensor_map", "C_tensor_map"]
    assert [i for i, a in enumerate(args) if type(a) is BlobArg] == maps
    assert [args[i] for i in maps] == [bytes([n]) * 128 for n in (1, 2, 3)]
    assert all(args[i].param_type == TENSOR_MAP for i in maps)
    # Storage order, inner first: A [M, K] row-major, B [K, N] row-major; C [M, N] f32, the
    # TMA store's map, a box a 32-column slab.
    assert recorded == [("f16", 0xA0000, (K, M), (2 * K,), (64, 128), 128),
                        ("f16", 0xB0000, (N, K), (2 * N,), (64, 64), 128),
                        ("f32", 0xC0000, (N, M), (4 * N,), (32, 128), 128)]
    # The ordinary parameters are as before.
    assert args[abi.index(next(p for p in abi if p.name == "A_ptr"))] == 0xA0000


def test_a_transposed_view_maps_the_tensor_as_stored(recorded):
    # matmul_bt reads B [N, K] row-major through B.T: K is B's inner dim.
    tensors = {**row_major_operands(), "B": array("B", (N, K), ptr=0xB0000)}
    compiled, bound = compile_for("matmul_bt.py", "matmul_bt", tensors)
    kernel_arguments(compiled.kernel, bound, bound.tensors)
    assert recorded[1] == ("f16", 0xB0000, (K, N), (2 * K,), (64, 256), 128)


def test_a_column_major_operand_maps_with_k_inner(recorded):
    # matmul with B [K, N] given as the transpose of a row-major [N, K].
    tensors = {**row_major_operands(), "B": array("B", (K, N), (1, K), ptr=0xB0000)}
    compiled, bound = compile_for("matmul.py", "matmul", tensors)
    kernel_arguments(compiled.kernel, bound, bound.tensors)
    box_inner, box_outer, _ = tensor_maps.tensor_map_box(compiled.kernel, "B")
    assert recorded[1] == ("f16", 0xB0000, (K, N), (2 * K,), (box_inner, box_outer), 128)


def test_an_argument_the_kernel_was_not_compiled_for_is_refused(recorded):
    compiled, bound = compile_for("matmul.py", "matmul", row_major_operands())
    column_major = {**bound.tensors, "A": array("A", (M, K), (1, M), ptr=0xA0000)}
    with pytest.raises(ValueError, match="TMA operand 'A': the kernel was compiled for an array "
                                         "whose dim 1 has unit stride"):
        kernel_arguments(compiled.kernel, bound, column_major)


def test_a_misaligned_operand_is_refused_before_the_driver(recorded):
    compiled, bound = compile_for("matmul.py", "matmul", row_major_operands())
    shifted = {**bound.tensors, "B": array("B", (K, N), ptr=0xB0008)}
    with pytest.raises(ValueError, match="TMA operand 'B': the base address must be 16-byte"):
        kernel_arguments(compiled.kernel, bound, shifted)
    assert len(recorded) == 1  # A's map only


def test_an_empty_operand_gets_a_blank_map_without_the_driver(recorded):
    compiled, bound = compile_for("matmul.py", "matmul", row_major_operands())
    empty = array("A", (M, 0), ptr=0)
    blob = tensor_map_argument(compiled.kernel, "A", empty)
    assert type(blob) is BlobArg and blob == bytes(128) and recorded == []


def fake_function() -> Function:
    """A Function as loading a module makes it, without a driver."""
    function = Function.__new__(Function)
    function.name, function.handle = "matmul", "handle"
    function._device = SimpleNamespace(make_current=lambda: None, compute_capability=(9, 0))
    function._max_threads, function._dynamic_shared_limit = 1024, 232448
    function._marshallers, function.lock = {}, threading.Lock()
    return function


def launched_params(fake, abi) -> list[tuple[int, bytes]]:
    """(address, bytes) of each parameter of the last cuLaunchKernel, read back."""
    call, args = fake.calls[-1]
    assert call == "cuLaunchKernel"
    out = []
    for index, param in enumerate(abi):
        pointer = ctypes.c_void_p.from_address(args[9] + 8 * index).value
        out.append((pointer, ctypes.string_at(pointer, param.type.size)))
    return out


def test_prepared_launches_encode_once_plain_launches_every_call(fake, recorded, monkeypatch):
    compiled, bound = compile_for("matmul.py", "matmul", row_major_operands(), stages=3)
    abi = kernel_abi(compiled.kernel)
    function = fake_function()
    import tilec.kernel
    monkeypatch.setattr(tilec.kernel, "loaded_function", lambda compiled: function)
    sizes = [M // 128 + (M % 128 > 0), N // 256 + (N % 256 > 0)]

    prepared = PreparedLaunch(compiled, bound, sizes, None)
    prepared()
    prepared()
    assert len(recorded) == 3  # one map per tensor, built with the argument list
    params = launched_params(fake, abi)
    maps = [i for i, p in enumerate(abi) if p.role == "tensor_map"]
    assert [params[i][1] for i in maps] == [bytes([n]) * 128 for n in (1, 2, 3)]
    assert all(params[i][0] % TENSOR_MAP.align == 0 for i in maps)

    launch_compiled(compiled, bound, bound.tensors, sizes)
    launch_compiled(compiled, bound, bound.tensors, sizes)
    assert len(recorded) == 9  # three more a call
    assert [launched_params(fake, abi)[i][1] for i in maps] == [bytes([n]) * 128
                                                                 for n in (7, 8, 9)]
