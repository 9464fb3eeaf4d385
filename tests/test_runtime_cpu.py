"""CPU tier of the runtime: everything that needs no GPU (errors, argument parsing, bf16 bits,
DLPack struct reading, kernel-parameter marshalling)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tilec.runtime import (
    F32Arg,
    I32Arg,
    I64Arg,
    ArrayArg,
    CudaError,
    GpuUnavailableError,
    HostStaging,
    PtrArg,
    as_array_arg,
    c_strides,
    check,
    configured_device_ordinal,
    current_device,
    describe_error,
    from_bf16_bits,
    gpu_unavailable_reason,
    has_gpu,
    parse_dlpack_capsule,
    to_bf16_bits,
)
from tilec.runtime.driver import _ParamMarshaller, signature

FAKE_PTR = 0x7F00_DEAD_0000  # never dereferenced: describing an argument only reads metadata


class FakeCudaArray:
    """A GPU array as seen through __cuda_array_interface__, with a made-up pointer."""

    def __init__(self, shape: tuple[int, ...], typestr: str = "<f2", *,
                 strides: tuple[int, ...] | None = None, version: int = 3,
                 device: Any = None, **extra: Any) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (FAKE_PTR, False), "strides": strides,
            "version": version, **extra,
        }
        if device is not None:
            self.device = device


class DLPackOnly:
    """Exposes another array only through the DLPack protocol."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.array.__dlpack_device__()


@pytest.fixture(autouse=True)
def _default_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TILEC_DEVICE", raising=False)


# --- GPU probing and errors ----------------------------------------------------------------------

def test_has_gpu_answers_without_raising() -> None:
    answer = has_gpu()
    assert isinstance(answer, bool)
    assert has_gpu() is answer
    if not answer:
        assert gpu_unavailable_reason()


def test_current_device_without_gpu_raises_clearly() -> None:
    if has_gpu():
        pytest.skip("this machine has a GPU")
    with pytest.raises(GpuUnavailableError, match="no usable GPU"):
        current_device()


def test_check_returns_values() -> None:
    cuda = pytest.importorskip("cuda.bindings.driver")
    success = cuda.CUresult.CUDA_SUCCESS
    assert check((success,)) is None
    assert check((success, 7)) == 7
    assert check((success, 1, 2)) == (1, 2)


def test_check_raises_with_the_driver_error_name() -> None:
    cuda = pytest.importorskip("cuda.bindings.driver")
    with pytest.raises(CudaError) as caught:
        check((cuda.CUresult.CUDA_ERROR_INVALID_PTX, None), "cuModuleLoadDataEx")
    error = caught.value
    assert error.name == "CUDA_ERROR_INVALID_PTX"
    assert error.call == "cuModuleLoadDataEx"
    assert error.jit_log == ""
    assert "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX" in str(error)


def test_cuda_error_shows_jit_log_and_hint() -> None:
    error = CudaError(218, "cuModuleLoadDataEx", jit_log="ptxas fatal : bad\nline 2",
                      hint="Repro command: ptxas -arch=sm_90a /tmp/x.ptx")
    text = str(error)
    assert "JIT log:\n    ptxas fatal : bad\n    line 2" in text
    assert text.endswith("Repro command: ptxas -arch=sm_90a /tmp/x.ptx")


def test_describe_error_of_unknown_code_does_not_raise() -> None:
    name, _ = describe_error(123456)
    assert "123456" in name


@pytest.mark.parametrize("raw, message", [("x", "device number"), ("-1", ">= 0")])
def test_tilec_device_must_be_a_device_number(monkeypatch: pytest.MonkeyPatch, raw: str,
                                              message: str) -> None:
    monkeypatch.setenv("TILEC_DEVICE", raw)
    with pytest.raises(ValueError, match=message):
        configured_device_ordinal()


# --- kernel parameters ---------------------------------------------------------------------------

@pytest.mark.parametrize("make, value", [
    (PtrArg, -1), (PtrArg, 2**64), (I32Arg, 2**31), (I32Arg, -(2**31) - 1), (I64Arg, 2**63),
    (F32Arg, 1e39),
])
def test_kernel_args_reject_out_of_range_values(make: type, value: float) -> None:
    with pytest.raises(ValueError):
        make(value)


def test_kernel_args_accept_their_extremes() -> None:
    assert PtrArg(2**64 - 1) == 2**64 - 1
    assert I32Arg(-(2**31)) == -(2**31)
    assert F32Arg(float("inf")) == float("inf")


def test_param_marshaller_points_each_parameter_at_its_value() -> None:
    args = (PtrArg(0x1234_5678_9ABC), I32Arg(-5), I64Arg(-(2**40)), F32Arg(1.5), I32Arg(7))
    marshaller = _ParamMarshaller(signature(args))
    address = marshaller.marshal(args)
    slot = [ctypes.c_void_p.from_address(address + 8 * index).value for index in range(5)]
    assert ctypes.c_uint64.from_address(slot[0]).value == 0x1234_5678_9ABC
    assert ctypes.c_int32.from_address(slot[1]).value == -5
    assert ctypes.c_int64.from_address(slot[2]).value == -(2**40)
    assert ctypes.c_float.from_address(slot[3]).value == 1.5
    assert ctypes.c_int32.from_address(slot[4]).value == 7
    # A second launch reuses the same memory: only the values change.
    assert marshaller.marshal((PtrArg(1), I32Arg(2), I64Arg(3), F32Arg(4.0), I32Arg(5))) == address
    assert ctypes.c_int64.from_address(slot[2]).value == 3


def test_param_marshaller_without_parameters_passes_null() -> None:
    assert _ParamMarshaller(()).marshal(()) == 0


# --- numpy arguments -----------------------------------------------------------------------------

@pytest.mark.parametrize("numpy_dtype, dtype", [
    (np.float16, "f16"), (np.float32, "f32"), (np.int32, "i32"),
])
def test_numpy_dtypes(numpy_dtype: type, dtype: str) -> None:
    array = np.zeros((2, 3), numpy_dtype)
    arg = as_array_arg(array, "A", dtype, 2)
    assert arg == ArrayArg(name="A", ptr=array.ctypes.data, dtype=dtype, shape=(2, 3),
                           strides=(3, 1), device=None, host=array)
    assert arg.host is array


def test_numpy_strides_are_in_elements() -> None:
    array = np.zeros((4, 6), np.float32)
    view = array[::2, 1:5].T
    arg = as_array_arg(view, "A")
    assert arg.shape == (4, 2)
    assert arg.strides == (1, 12)
    assert arg.ptr == array.ctypes.data + 4
    assert not arg.is_c_contiguous


def test_numpy_zero_size_is_fine() -> None:
    arg = as_array_arg(np.zeros((0, 5), np.float16), "A", "f16", 2)
    assert arg.shape == (0, 5)
    assert arg.size == 0


def test_not_an_array_is_a_type_error() -> None:
    with pytest.raises(TypeError) as caught:
        as_array_arg([1.0, 2.0], "A", "f16", 2)
    assert str(caught.value) == ("argument 'A': expected a numpy array or a GPU array "
                                 "(__cuda_array_interface__ or DLPack), got list")


def test_wrong_dtype_is_a_type_error() -> None:
    with pytest.raises(TypeError) as caught:
        as_array_arg(np.zeros((2, 2), np.float32), "A", "f16", 2)
    assert str(caught.value) == "argument 'A': expected dtype f16, got float32"


def test_uint16_is_not_silently_bf16() -> None:
    with pytest.raises(TypeError, match="expected dtype bf16, got uint16"):
        as_array_arg(np.zeros((2, 2), np.uint16), "A", "bf16", 2)
    with pytest.raises(TypeError, match="unsupported dtype uint16"):
        as_array_arg(np.zeros((2, 2), np.uint16), "A")


def test_ml_dtypes_bfloat16_is_bf16() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.zeros((2, 2), ml_dtypes.bfloat16)
    assert as_array_arg(array, "A", "bf16", 2).dtype == "bf16"


def test_big_endian_is_not_f32() -> None:
    with pytest.raises(TypeError, match="expected dtype f32"):
        as_array_arg(np.zeros(3, ">f4"), "A", "f32")


def test_wrong_rank_is_a_value_error() -> None:
    with pytest.raises(ValueError) as caught:
        as_array_arg(np.zeros(3, np.float16), "A", "f16", 2, dim_names=["M", "K"])
    assert str(caught.value) == "argument 'A': expected a 2-D array [M, K], got shape (3,)"


def test_negative_stride_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="argument 'A' has a negative stride .* pass a copy"):
        as_array_arg(np.zeros((2, 3), np.float32)[:, ::-1], "A", "f32", 2)


def test_stride_not_a_multiple_of_the_element_size_is_a_value_error() -> None:
    records = np.zeros(4, dtype=[("value", "<f4"), ("tag", "u1")])
    with pytest.raises(ValueError, match="not multiples of its element size 4"):
        as_array_arg(records["value"], "A", "f32", 1)


def test_read_only_numpy_array_is_marked() -> None:
    array = np.zeros(3, np.float32)
    array.flags.writeable = False
    assert as_array_arg(array, "A").readonly


def test_bad_expected_dtype_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="expected_dtype"):
        as_array_arg(np.zeros(3, np.float32), "A", "float32")


# --- __cuda_array_interface__ --------------------------------------------------------------------

@pytest.mark.parametrize("version", [2, 3])
def test_cuda_array_interface_contiguous(version: int) -> None:
    arg = as_array_arg(FakeCudaArray((4, 8), "<f2", version=version), "A", "f16", 2)
    assert (arg.ptr, arg.dtype, arg.shape, arg.strides) == (FAKE_PTR, "f16", (4, 8), (8, 1))
    assert arg.device == 0
    assert arg.host is None


def test_cuda_array_interface_byte_strides_become_element_strides() -> None:
    arg = as_array_arg(FakeCudaArray((4, 8), "<f4", strides=(4, 64)), "B", "f32", 2)
    assert arg.strides == (1, 16)


@pytest.mark.parametrize("strides", [None, (80, 1)])
def test_cuda_array_interface_uint8_bits_for_an_fp8_parameter(strides) -> None:
    """A GPU uint8 array (CuPy's, say) holds fp8 bits; it used to fail with KeyError 'u8'."""
    arg = as_array_arg(FakeCudaArray((4, 77), "|u1", strides=strides), "W", "f8e4m3", 2)
    expected_strides = (strides or (77,))[0:1] + (1,)
    assert (arg.dtype, arg.shape, arg.strides) == ("f8e4m3", (4, 77), expected_strides)
    with pytest.raises(TypeError, match="argument 'W': expected dtype i8"):
        as_array_arg(FakeCudaArray((4, 77), "|u1"), "W", "i8", 2)


def test_cuda_array_interface_i32_and_zero_size() -> None:
    fake = FakeCudaArray((0, 3), "<i4")
    fake.__cuda_array_interface__["data"] = (0, False)
    arg = as_array_arg(fake, "C", "i32", 2)
    assert (arg.ptr, arg.shape, arg.strides) == (0, (0, 3), (3, 1))


def test_cuda_array_interface_dtype_and_rank_errors() -> None:
    with pytest.raises(TypeError, match="argument 'A': expected dtype f32, got float64"):
        as_array_arg(FakeCudaArray((2, 2), "<f8"), "A", "f32", 2)
    with pytest.raises(ValueError, match=r"expected a 2-D array, got shape \(2, 2, 2\)"):
        as_array_arg(FakeCudaArray((2, 2, 2)), "A", "f16", 2)


def test_cuda_array_interface_bad_strides() -> None:
    with pytest.raises(ValueError, match="negative stride"):
        as_array_arg(FakeCudaArray((2, 2), strides=(4, -2)), "A", "f16", 2)
    with pytest.raises(ValueError, match="not multiples"):
        as_array_arg(FakeCudaArray((2, 2), strides=(5, 2)), "A", "f16", 2)


def test_cuda_array_interface_unsupported_features() -> None:
    with pytest.raises(ValueError, match="version 1"):
        as_array_arg(FakeCudaArray((2,), version=1), "A")
    with pytest.raises(ValueError, match="masked"):
        as_array_arg(FakeCudaArray((2,), mask=object()), "A")


def test_gpu_array_on_another_device(monkeypatch: pytest.MonkeyPatch) -> None:
    torch_like = FakeCudaArray((2, 2), device=SimpleNamespace(index=1))
    with pytest.raises(ValueError) as caught:
        as_array_arg(torch_like, "B", "f16", 2)
    assert str(caught.value) == "argument 'B' lives on cuda:1 but tilec runs on cuda:0"
    monkeypatch.setenv("TILEC_DEVICE", "1")
    assert as_array_arg(torch_like, "B", "f16", 2).device == 1
    cupy_like = FakeCudaArray((2, 2), device=SimpleNamespace(id=0))
    with pytest.raises(ValueError, match="lives on cuda:0 but tilec runs on cuda:1"):
        as_array_arg(cupy_like, "B")


def test_cuda_array_interface_keeps_the_producer_alive() -> None:
    fake = FakeCudaArray((2,))
    assert as_array_arg(fake, "A").keepalive is fake


def test_failing_cuda_array_interface_falls_back_to_dlpack() -> None:
    class Bf16TensorLike(DLPackOnly):
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            raise TypeError("dtype not supported by __cuda_array_interface__")

    array = np.arange(4, dtype=np.float32)
    assert as_array_arg(Bf16TensorLike(array), "A", "f32").ptr == array.ctypes.data

    class Broken:
        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            raise TypeError("broken producer")

    with pytest.raises(TypeError, match="broken producer"):
        as_array_arg(Broken(), "A")


# --- DLPack --------------------------------------------------------------------------------------

@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_parse_numpy_dlpack_capsule(max_version: tuple[int, int] | None) -> None:
    array = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = array[1:, 2:5]
    capsule = view.__dlpack__(max_version=max_version) if max_version else view.__dlpack__()
    parsed = parse_dlpack_capsule(capsule)
    assert (parsed.device_type, parsed.device_id) == (1, 0)
    assert parsed.ptr == array.ctypes.data + (6 + 2) * 4
    assert (parsed.type_code, parsed.bits, parsed.lanes) == (2, 32, 1)
    assert parsed.shape == (3, 3)
    assert parsed.strides == (6, 1)
    assert parsed.dtype_label == "float32"
    assert not parsed.readonly


@pytest.mark.parametrize("numpy_dtype, code, bits", [
    (np.float16, 2, 16), (np.int32, 0, 32), (np.int64, 0, 64),
])
def test_parse_dlpack_dtypes(numpy_dtype: type, code: int, bits: int) -> None:
    parsed = parse_dlpack_capsule(np.zeros(3, numpy_dtype).__dlpack__())
    assert (parsed.type_code, parsed.bits) == (code, bits)


def test_parse_dlpack_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="not a PyCapsule"):
        parse_dlpack_capsule(b"dltensor")


def test_dlpack_host_array_is_a_zero_copy_view() -> None:
    array = np.zeros((3, 4), np.float32)
    arg = as_array_arg(DLPackOnly(array[:, 1:]), "A", "f32", 2)
    assert (arg.ptr, arg.shape, arg.strides, arg.device) == (array.ctypes.data + 4, (3, 3),
                                                            (4, 1), None)
    arg.host[...] = 5.0  # what HostStaging does for written arguments
    assert (array[:, 1:] == 5.0).all() and (array[:, 0] == 0.0).all()


def test_dlpack_errors_match_numpy_errors() -> None:
    with pytest.raises(TypeError, match="argument 'A': expected dtype f16, got int64"):
        as_array_arg(DLPackOnly(np.zeros(2, np.int64)), "A", "f16")
    with pytest.raises(ValueError, match="expected a 2-D array"):
        as_array_arg(DLPackOnly(np.zeros(2, np.float16)), "A", "f16", 2)


# --- bf16 bits -----------------------------------------------------------------------------------

def test_bf16_round_trip_is_exact_for_every_pattern() -> None:
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    values = from_bf16_bits(bits)
    assert values.dtype == np.float32
    again = to_bf16_bits(values)
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(again[finite], bits[finite])
    assert np.isnan(from_bf16_bits(again[~finite])).all()


def test_bf16_rounds_to_nearest_even() -> None:
    one = 0x3F80
    cases = {
        1.0 + 2**-8: one,  # halfway, even neighbour is 1.0
        1.0 + 3 * 2**-8: one + 2,  # halfway, even neighbour is above
        1.0 + 2**-8 + 2**-20: one + 1,  # just above halfway rounds up
        -(1.0 + 2**-8): 0x8000 | one,
        3.4e38: 0x7F80,  # past the largest bf16: infinity
    }
    values = np.array(list(cases), np.float32)
    np.testing.assert_array_equal(to_bf16_bits(values), np.array(list(cases.values()), np.uint16))


def test_bf16_keeps_nan_and_scalars() -> None:
    assert np.isnan(from_bf16_bits(to_bf16_bits(np.float32("nan"))))
    assert to_bf16_bits(1.5) == 0x3FC0


def test_from_bf16_bits_refuses_floats() -> None:
    with pytest.raises(TypeError, match="uint16"):
        from_bf16_bits(np.zeros(2, np.float32))


# --- staging (the parts that need no device) -----------------------------------------------------

def test_staging_passes_gpu_arguments_through() -> None:
    arg = as_array_arg(FakeCudaArray((2, 2)), "A", "f16", 2)
    with HostStaging() as staging:
        assert staging.to_device(arg, written=True) is arg


def test_staging_refuses_to_write_read_only_arrays() -> None:
    fake = FakeCudaArray((2,))
    fake.__cuda_array_interface__["data"] = (FAKE_PTR, True)
    with pytest.raises(ValueError, match="argument 'C' is read-only but the kernel writes it"):
        HostStaging().to_device(as_array_arg(fake, "C"), written=True)


def test_c_strides() -> None:
    assert c_strides((2, 3, 4)) == (12, 4, 1)
    assert c_strides((0, 3)) == (3, 1)
    assert c_strides(()) == ()


def test_cuda_array_interface_without_a_dtype_name_falls_back_to_dlpack() -> None:
    class RawBytesTensorLike(DLPackOnly):
        # What PyTorch exports for bf16: raw two-byte elements.
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<V2", "data": (FAKE_PTR, False),
                                    "strides": None, "version": 3}

    array = np.arange(4, dtype=np.float16)
    assert as_array_arg(RawBytesTensorLike(array), "A", "f16").ptr == array.ctypes.data
    with pytest.raises(TypeError, match="expected dtype bf16, got void16"):
        as_array_arg(FakeCudaArray((4,), "<V2"), "A", "bf16")
