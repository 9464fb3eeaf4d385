"""The one door to the CUDA driver: devices, modules, launches, streams, events and memory.

This is the only module in tilec that imports `cuda.bindings.driver`. Every driver call goes
through `check()`, which turns cuda-python's `(err, *values)` tuples into values or a `CudaError`
carrying the driver's error name, so callers never see raw result codes.

Nothing here touches the driver at import time: a machine without a GPU (or without cuda-python)
can import tilec, ask `has_gpu()`, and get a clean `False` with a reason.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import struct
import tempfile
import threading
from collections.abc import Sequence
from typing import Any, ClassVar, Union

import numpy as np

from tilec.backend import abi
from tilec.backend.abi import ParamType

# cuda-python is optional (the `gpu` extra): any failure to import it just means "no GPU".
try:
    from cuda.bindings import driver as _cuda
except Exception as _error:  # noqa: BLE001
    _cuda = None
    _IMPORT_FAILURE = f"cuda-python is not importable ({type(_error).__name__}: {_error})"
else:
    _IMPORT_FAILURE = ""

# 64 KiB each: ptxas' verbose info log for a large kernel runs to a few KiB; room to spare.
_JIT_LOG_BYTES = 64 * 1024
_MAX_GRID_X = 2**31 - 1
_MAX_GRID_YZ = 65535
_MAX_BLOCK = (1024, 1024, 64)
_F32_MAX = float(np.finfo(np.float32).max)


class CudaError(RuntimeError):
    """A driver call failed.

    `name` is the driver's error name (`CUDA_ERROR_INVALID_PTX`), `message` its description,
    `call` the driver function, `jit_log` the JIT compiler's log (empty for non-JIT calls) and
    `hint` a next step for the reader, such as a ptxas repro command.
    """

    def __init__(self, code: int, call: str, *, jit_log: str = "", hint: str = "") -> None:
        self.code = int(code)
        self.name, self.message = describe_error(self.code)
        self.call = call
        self.jit_log = jit_log
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        text = f"{self.call or 'CUDA driver call'} failed: {self.name}"
        if self.message:
            text += f" ({self.message})"
        if self.jit_log:
            text += "\nJIT log:\n" + _indent(self.jit_log)
        if self.hint:
            text += "\n" + self.hint
        return text


class GpuUnavailableError(RuntimeError):
    """Raised when GPU work is asked for on a machine where `has_gpu()` is False."""


def describe_error(code: int) -> tuple[str, str]:
    """Return the driver's (name, description) of a result code.

    The driver library answers best, but it may be missing (a CPU-only machine), so the
    `CUresult` enum of cuda-python, which needs no driver, names the code as a fallback.
    """
    name = f"CUDA error {code}"
    message = ""
    if _cuda is None:
        return name, message
    try:
        name = _cuda.CUresult(code).name
    except ValueError:
        pass
    try:
        err, raw_name = _cuda.cuGetErrorName(code)
        if err == 0 and raw_name:
            name = raw_name.decode()
        err, raw_message = _cuda.cuGetErrorString(code)
        if err == 0 and raw_message:
            message = raw_message.decode()
    except Exception:  # noqa: BLE001 - no driver library: the enum name is all there is
        pass
    return name, message


def check(result: tuple[Any, ...], call: str = "") -> Any:
    """Turn cuda-python's `(err, *values)` into None, the single value, or a tuple of values."""
    err = result[0]
    if err != 0:  # CUresult is an int subclass, so this is a cheap int comparison
        raise CudaError(err, call)
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


def _call(function: Any, *args: Any) -> Any:
    return check(function(*args), function.__name__)


# --- Is there a GPU? -----------------------------------------------------------------------------

_probe_lock = threading.Lock()
_probe_result: tuple[bool, str] | None = None


def has_gpu() -> bool:
    """True when cuda-python imports, the driver loads, cuInit succeeds and a device exists.

    Never raises; the answer is computed once per process.
    """
    return _probe()[0]


def gpu_unavailable_reason() -> str:
    """Why `has_gpu()` is False, for skip messages and errors; empty when a GPU is usable."""
    return _probe()[1]


def _probe() -> tuple[bool, str]:
    global _probe_result
    with _probe_lock:
        if _probe_result is None:
            _probe_result = _probe_uncached()
        return _probe_result


def _probe_uncached() -> tuple[bool, str]:
    if _cuda is None:
        return False, _IMPORT_FAILURE
    try:
        err = _cuda.cuInit(0)[0]
        if err != 0:
            return False, f"cuInit failed: {describe_error(err)[0]}"
        err, count = _cuda.cuDeviceGetCount()
        if err != 0:
            return False, f"cuDeviceGetCount failed: {describe_error(err)[0]}"
    except Exception as error:  # noqa: BLE001 - e.g. DynamicLibNotFoundError: no driver installed
        return False, f"the CUDA driver could not be loaded ({type(error).__name__}: {error})"
    if count < 1:
        return False, "the CUDA driver reports no devices"
    return True, ""


# --- Device and context --------------------------------------------------------------------------

def configured_device_ordinal() -> int:
    """The device tilec runs on: `TILEC_DEVICE` if set, else 0. Reads no driver state."""
    raw = os.environ.get("TILEC_DEVICE", "0")
    try:
        ordinal = int(raw)
    except ValueError:
        raise ValueError(f"TILEC_DEVICE must be a device number such as 0, got {raw!r}") from None
    if ordinal < 0:
        raise ValueError(f"TILEC_DEVICE must be >= 0, got {ordinal}")
    return ordinal


class Device:
    """One GPU with its primary context retained and made current.

    The primary context is the one PyTorch, CuPy and the runtime API share, so device pointers
    from those libraries are valid in our launches without any context juggling.
    """

    def __init__(self, ordinal: int) -> None:
        if not has_gpu():
            raise GpuUnavailableError(f"no usable GPU: {gpu_unavailable_reason()}")
        count = _call(_cuda.cuDeviceGetCount)
        if not 0 <= ordinal < count:
            raise ValueError(f"device {ordinal} requested (TILEC_DEVICE) but only {count} exist")
        self.ordinal = ordinal
        self.handle = _call(_cuda.cuDeviceGet, ordinal)
        self.context = _call(_cuda.cuDevicePrimaryCtxRetain, self.handle)
        self._thread_state = threading.local()
        self.make_current()
        raw_name = _call(_cuda.cuDeviceGetName, 256, self.handle)
        self.name: str = raw_name.split(b"\0", 1)[0].decode()
        attribute = _cuda.CUdevice_attribute
        self.compute_capability: tuple[int, int] = (
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        )
        self.multiprocessor_count: int = self._attribute(
            attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.max_threads_per_block: int = self._attribute(
            attribute.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        self.max_shared_memory_per_block: int = self._attribute(
            attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
        self.max_shared_memory_per_block_optin: int = self._attribute(
            attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

    @property
    def arch(self) -> str:
        """The ptxas target name, e.g. "sm_90" (architecture-specific "a" suffixes are the
        compiler's choice, not the device's)."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    def make_current(self) -> None:
        """Make the primary context current on the calling thread (contexts are per thread)."""
        # A thread-local flag keeps this off the driver on the hot launch path.
        if getattr(self._thread_state, "current", False):
            return
        _call(_cuda.cuCtxSetCurrent, self.context)
        self._thread_state.current = True

    def _attribute(self, attribute: Any) -> int:
        return int(_call(_cuda.cuDeviceGetAttribute, attribute, self.handle))

    def __repr__(self) -> str:
        return f"Device({self.ordinal}, {self.name!r}, {self.arch})"


_device_lock = threading.Lock()
_device: Device | None = None


def current_device() -> Device:
    """The process-wide Device, created on first use (device 0 or `TILEC_DEVICE`)."""
    global _device
    device = _device
    if device is None:
        with _device_lock:
            if _device is None:
                _device = Device(configured_device_ordinal())
            device = _device
    device.make_current()
    return device


def synchronize() -> None:
    """Wait for all work in the context; asynchronous kernel faults surface here as CudaError."""
    current_device()
    _call(_cuda.cuCtxSynchronize)


def pointer_device_ordinal(ptr: int) -> int:
    """The ordinal of the device that owns a device pointer."""
    current_device()
    attribute = _cuda.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(_call(_cuda.cuPointerGetAttribute, attribute, ptr))


# --- Streams and events --------------------------------------------------------------------------

class Stream:
    """A CUDA stream: `Stream()` creates and owns one; `Stream.wrap(handle)` borrows a foreign
    one (such as `torch.cuda.current_stream().cuda_stream`) without destroying it."""

    def __init__(self) -> None:
        self._owned = False
        current_device()
        # Default flags keep the stream ordered with the legacy default stream that tilec's
        # staging copies use, so mixing the two needs no extra events.
        self.handle = _call(_cuda.cuStreamCreate, _cuda.CUstream_flags.CU_STREAM_DEFAULT.value)
        self._owned = True

    @classmethod
    def wrap(cls, handle: int) -> Stream:
        stream = cls.__new__(cls)
        stream._owned = False
        stream.handle = _cuda.CUstream(handle)
        return stream

    def synchronize(self) -> None:
        _call(_cuda.cuStreamSynchronize, self.handle)

    def __int__(self) -> int:
        return int(self.handle)

    def __del__(self) -> None:
        if getattr(self, "_owned", False):
            try:
                _cuda.cuStreamDestroy(self.handle)
            except Exception:  # noqa: BLE001 - interpreter shutdown may have torn the driver down
                pass


StreamLike = Union[Stream, int, None]


def _stream_handle(stream: StreamLike) -> Any:
    if stream is None:
        return _LEGACY_STREAM
    if isinstance(stream, Stream):
        return stream.handle
    if isinstance(stream, int):
        return _cuda.CUstream(stream)
    raise TypeError(f"expected a Stream, a raw stream handle (int) or None, got {type(stream)}")


# The legacy default stream (handle 0) synchronizes with every blocking stream, which makes it
# the safe default for arguments produced by other libraries.
_LEGACY_STREAM = _cuda.CUstream(0) if _cuda is not None else None


class Event:
    """A timing event: `record` on a stream, `synchronize`, then `Event.elapsed_ms(start, end)`."""

    def __init__(self) -> None:
        self.handle = None
        current_device()
        self.handle = _call(_cuda.cuEventCreate, _cuda.CUevent_flags.CU_EVENT_DEFAULT.value)

    def record(self, stream: StreamLike = None) -> None:
        _call(_cuda.cuEventRecord, self.handle, _stream_handle(stream))

    def synchronize(self) -> None:
        _call(_cuda.cuEventSynchronize, self.handle)

    @staticmethod
    def elapsed_ms(start: Event, end: Event) -> float:
        """Milliseconds between two recorded events (synchronizes on `end` first)."""
        end.synchronize()
        return float(_call(_cuda.cuEventElapsedTime, start.handle, end.handle))

    def __del__(self) -> None:
        if getattr(self, "handle", None) is not None:
            try:
                _cuda.cuEventDestroy(self.handle)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


elapsed_ms = Event.elapsed_ms


# --- Device memory -------------------------------------------------------------------------------

class DeviceBuffer:
    """`nbytes` of device memory, freed by `free()` or when garbage collected.

    A zero-byte buffer allocates nothing and has `ptr == 0` (cuMemAlloc rejects size 0, and
    zero-size arrays are legal tilec arguments).
    """

    def __init__(self, nbytes: int) -> None:
        self.ptr = 0
        if nbytes < 0:
            raise ValueError(f"DeviceBuffer size must be >= 0, got {nbytes}")
        self.nbytes = int(nbytes)
        if self.nbytes:
            current_device()
            self.ptr = int(_call(_cuda.cuMemAlloc, self.nbytes))

    def copy_from_host(self, array: np.ndarray) -> None:
        """Copy a C-contiguous host array into the start of the buffer (synchronous)."""
        self._check_host_array(array, "copy_from_host")
        if array.nbytes:
            _call(_cuda.cuMemcpyHtoD, self.ptr, array.ctypes.data, array.nbytes)

    def copy_to_host(self, array: np.ndarray) -> None:
        """Fill a C-contiguous, writeable host array from the start of the buffer (synchronous)."""
        self._check_host_array(array, "copy_to_host")
        if not array.flags.writeable:
            raise ValueError("copy_to_host needs a writeable array")
        if array.nbytes:
            _call(_cuda.cuMemcpyDtoH, array.ctypes.data, self.ptr, array.nbytes)

    def memset_d8(self, value: int) -> None:
        """Set every byte of the buffer to `value` (0..255)."""
        if not 0 <= value <= 255:
            raise ValueError(f"memset_d8 takes a byte value 0..255, got {value}")
        if self.nbytes:
            _call(_cuda.cuMemsetD8, self.ptr, value, self.nbytes)

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            _call(_cuda.cuMemFree, ptr)

    def _check_host_array(self, array: np.ndarray, what: str) -> None:
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{what} needs a numpy array, got {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{what} needs a C-contiguous array (use numpy.ascontiguousarray)")
        if array.nbytes > self.nbytes:
            raise ValueError(f"{what}: array has {array.nbytes} bytes, buffer {self.nbytes}")

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown or a context already torn down
            pass

    def __repr__(self) -> str:
        return f"DeviceBuffer(ptr=0x{self.ptr:x}, nbytes={self.nbytes})"


# --- Kernel parameters ---------------------------------------------------------------------------
# Each value class names its parameter type (backend/abi.py), which knows the bytes the driver
# copies for it; a launch lays those out once per signature (_ParamMarshaller).

class PtrArg(int):
    """A device address, passed as a `.u64` kernel parameter."""

    __slots__ = ()
    param_type: ClassVar[ParamType] = abi.POINTER

    def __new__(cls, value: int) -> PtrArg:
        self = super().__new__(cls, value)
        if not 0 <= self < 2**64:
            raise ValueError(f"PtrArg must fit in 64 unsigned bits, got {int(self)}")
        return self


class I32Arg(int):
    """A `.s32` kernel parameter (also right for `.u32` parameters below 2**31)."""

    __slots__ = ()
    param_type: ClassVar[ParamType] = abi.I32_PARAM

    def __new__(cls, value: int) -> I32Arg:
        self = super().__new__(cls, value)
        if not -(2**31) <= self < 2**31:
            raise ValueError(f"I32Arg out of signed 32-bit range: {int(self)}")
        return self


class I64Arg(int):
    """A `.s64` kernel parameter."""

    __slots__ = ()
    param_type: ClassVar[ParamType] = abi.I64_PARAM

    def __new__(cls, value: int) -> I64Arg:
        self = super().__new__(cls, value)
        if not -(2**63) <= self < 2**63:
            raise ValueError(f"I64Arg out of 64-bit range: {int(self)}")
        return self


class F32Arg(float):
    """A `.f32` kernel parameter (rounded to single precision when marshalled)."""

    __slots__ = ()
    param_type: ClassVar[ParamType] = abi.F32_PARAM

    def __new__(cls, value: float) -> F32Arg:
        self = super().__new__(cls, value)
        # struct's "f" code raises OverflowError on such values at launch time; fail here instead.
        if math.isfinite(self) and abs(self) > _F32_MAX:
            raise ValueError(f"F32Arg overflows single precision: {float(self)}")
        return self


class BlobArg(bytes):
    """Opaque bytes passed by value, such as a 128-byte TMA tensor map (`.param .align 64 .b8
    name[128]`); the driver copies them from storage aligned to `align`."""

    param_type: abi.BlobParam  # per value: its size is the value's length

    def __new__(cls, data: bytes, align: int = 64) -> BlobArg:
        self = super().__new__(cls, data)
        self.param_type = abi.BlobParam(len(self), align)
        return self


KernelArg = Union[PtrArg, I32Arg, I64Arg, F32Arg, BlobArg]

# The value class of each scalar and pointer parameter type (a blob's is BlobArg).
_ARGUMENT_CLASSES: dict[ParamType, type] = {
    cls.param_type: cls for cls in (PtrArg, I32Arg, I64Arg, F32Arg)}


def kernel_argument(param_type: ParamType, value: Any) -> KernelArg:
    """`value` as the argument of a parameter of `param_type`."""
    if isinstance(param_type, abi.BlobParam):
        return BlobArg(value, param_type.align)
    return _ARGUMENT_CLASSES[param_type](value)


class _ParamMarshaller:
    """Pre-built kernelParams for one signature of parameter types: storage holding every value
    at an offset aligned to its type, and the array of pointers into it the driver reads. A
    launch only writes values (one struct.pack_into) and passes the array's address."""

    def __init__(self, signature: tuple[ParamType, ...]) -> None:
        offsets, end = [], 0
        for param_type in signature:
            end = -(-end // param_type.align) * param_type.align
            offsets.append(end)
            end += param_type.size
        align = max((param_type.align for param_type in signature), default=1)
        # Room to align the start: ctypes only promises 8 or 16 bytes.
        self._storage = (ctypes.c_uint8 * (end + align))()
        storage = ctypes.addressof(self._storage)
        self._start = -(-storage // align) * align - storage
        layout, position = ["<"], 0
        for param_type, offset in zip(signature, offsets):
            layout.append(f"{offset - position}x{param_type.struct_format}")
            position = offset + param_type.size
        self._struct = struct.Struct("".join(layout))
        count = len(signature)
        self._pointers = (ctypes.c_void_p * max(count, 1))(
            *(storage + self._start + offset for offset in offsets))
        self.address = ctypes.addressof(self._pointers) if count else 0

    def marshal(self, args: Sequence[KernelArg]) -> int:
        self._struct.pack_into(self._storage, self._start, *args)
        return self.address


def signature(args: Sequence[KernelArg]) -> tuple[ParamType, ...]:
    """The parameter types of a launch's arguments; TypeError for an untyped value."""
    try:
        return tuple(arg.param_type for arg in args)  # the launch path: no per-arg checks
    except AttributeError:
        pass
    index, arg = next((i, a) for i, a in enumerate(args) if not hasattr(a, "param_type"))
    raise TypeError(f"kernel argument {index} has type {type(arg).__name__}; wrap it as PtrArg, "
                    "I32Arg, I64Arg, F32Arg or BlobArg so its parameter type is explicit")


# --- TMA tensor maps -----------------------------------------------------------------------------
# A TMA load (cp.async.bulk.tensor) reads global memory through a 128-byte descriptor the host
# encodes once per tensor; the kernel takes it by value (abi.TENSOR_MAP).

TENSOR_MAP_BYTES = 128
# The CUtensorMapDataType of each tilec dtype a TMA load or store may move.
_TENSOR_MAP_DTYPES = {"f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
                      "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
                      "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
                      "i32": "CU_TENSOR_MAP_DATA_TYPE_INT32",  # TMA-stored int8 sums
                      # 8-bit operands move as bytes: TMA only copies them.
                      "i8": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
                      "f8e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
                      "f8e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8"}
# Swizzle span in bytes -> CUtensorMapSwizzle (0: none).
_TENSOR_MAP_SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B",
                        64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}
# L2 promotion in bytes -> CUtensorMapL2promotion: how much L2 fetches around each request.
_TENSOR_MAP_L2_PROMOTIONS = {128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
                             256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}


def encode_tensor_map(dtype: str, address: int, dims: Sequence[int], byte_strides: Sequence[int],
                      box: Sequence[int], swizzle_bytes: int, *, l2_promotion_bytes: int = 256,
                      what: str = "a tensor") -> bytes:
    """The 128 bytes of a tiled TMA tensor map (`cuTensorMapEncodeTiled`), for a kernel
    parameter passed by value.

    Everything is in storage order, innermost (contiguous) dim first: `dims` in elements,
    `byte_strides` the strides of the dims after the first, in bytes (rank - 1 of them), `box`
    the elements one load moves along each dim. Element strides are 1, nothing is interleaved,
    and out-of-bounds elements read as zeros (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), which is what
    makes ragged edges need no masks. `what` names the tensor in errors. The caller checks
    TMA's rules first (tilec.launch.tensor_maps), so a driver refusal here is unexpected; it
    raises CudaError with the driver's error name and these arguments.
    """
    rank = len(dims)
    if len(byte_strides) != rank - 1 or len(box) != rank:
        raise ValueError(f"tensor map of {what}: {rank} dims need {rank - 1} byte strides and "
                         f"{rank} box dims, got {len(byte_strides)} and {len(box)}")
    for label, value, table in (("dtype", dtype, _TENSOR_MAP_DTYPES),
                                ("swizzle", swizzle_bytes, _TENSOR_MAP_SWIZZLES),
                                ("L2 promotion", l2_promotion_bytes, _TENSOR_MAP_L2_PROMOTIONS)):
        if value not in table:
            raise ValueError(f"tensor map of {what}: {label} must be one of "
                             f"{', '.join(map(str, table))}, got {value!r}")
    if not has_gpu():
        raise GpuUnavailableError(f"no usable GPU to encode a tensor map: "
                                  f"{gpu_unavailable_reason()}")
    # cuda.bindings wants its own fixed-width integer objects in these lists, not Python ints.
    u64, u32 = _cuda.cuuint64_t, _cuda.cuuint32_t
    err, tensor_map = _cuda.cuTensorMapEncodeTiled(
        getattr(_cuda.CUtensorMapDataType, _TENSOR_MAP_DTYPES[dtype]), rank, int(address),
        [u64(int(d)) for d in dims], [u64(int(s)) for s in byte_strides],
        [u32(int(b)) for b in box], [u32(1)] * rank,
        _cuda.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(_cuda.CUtensorMapSwizzle, _TENSOR_MAP_SWIZZLES[swizzle_bytes]),
        getattr(_cuda.CUtensorMapL2promotion, _TENSOR_MAP_L2_PROMOTIONS[l2_promotion_bytes]),
        _cuda.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != 0:
        raise CudaError(err, "cuTensorMapEncodeTiled", hint=(
            f"tensor map of {what}: dtype {dtype}, address 0x{int(address):x}, dims "
            f"{list(dims)}, byte strides {list(byte_strides)}, box {list(box)}, swizzle "
            f"{swizzle_bytes} B (storage order, innermost first)"))
    # Copy the bytes out at once: the CUtensorMap object's own storage need not be 64-byte
    # aligned, so only the copy (laid out by the launch at the parameter's alignment) is used.
    return ctypes.string_at(tensor_map.getPtr(), TENSOR_MAP_BYTES)


# --- Modules and functions -----------------------------------------------------------------------

class Module:
    """A loaded PTX module.

    `jit_log` holds ptxas' info log (registers, spills, stack). It is empty when the driver's
    JIT cache served the module without compiling; CUDA_CACHE_DISABLE=1 forces a compile.
    """

    def __init__(self, handle: Any, *, name: str, ptx: str, jit_log: str, device: Device) -> None:
        self.handle = handle
        self.name = name
        self.ptx = ptx
        self.jit_log = jit_log
        self.device = device
        self._functions: dict[str, Function] = {}

    def function(self, name: str) -> Function:
        """The kernel called `name` (the `.entry` name in the PTX)."""
        function = self._functions.get(name)
        if function is None:
            self.device.make_current()
            err, handle = _cuda.cuModuleGetFunction(self.handle, name.encode())
            if err != 0:
                entries = re.findall(r"\.entry\s+([\w$]+)", self.ptx)
                raise CudaError(err, "cuModuleGetFunction", hint=(
                    f"looking up {name!r}; kernels in module {self.name!r}: "
                    f"{', '.join(entries) or 'none'}"))
            function = Function(self, name, handle)
            self._functions[name] = function
        return function

    def __del__(self) -> None:
        if getattr(self, "handle", None) is not None:
            try:
                _cuda.cuModuleUnload(self.handle)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


def load_module(ptx: str, *, name: str = "kernel") -> Module:
    """JIT-compile and load PTX text into the current context.

    On failure the CudaError carries ptxas' error log and a repro command over a copy of the PTX
    written to a temporary file, so the failure can be reproduced outside tilec.
    """
    device = current_device()
    jit = _cuda.CUjit_option
    info_log = bytearray(_JIT_LOG_BYTES)
    error_log = bytearray(_JIT_LOG_BYTES)
    options = [
        jit.CU_JIT_INFO_LOG_BUFFER,
        jit.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        jit.CU_JIT_ERROR_LOG_BUFFER,
        jit.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        jit.CU_JIT_LOG_VERBOSE,
    ]
    values = [info_log, _JIT_LOG_BYTES, error_log, _JIT_LOG_BYTES, 1]
    image = ptx.encode() + b"\0"  # the driver reads PTX as a C string
    err, handle = _cuda.cuModuleLoadDataEx(image, len(options), options, values)
    if err != 0:
        log = "\n".join(part for part in (_c_string(error_log), _c_string(info_log)) if part)
        raise CudaError(err, "cuModuleLoadDataEx", jit_log=log,
                        hint=_repro_hint(ptx, name, device))
    return Module(handle, name=name, ptx=ptx, jit_log=_c_string(info_log), device=device)


def _repro_hint(ptx: str, name: str, device: Device) -> str:
    # The PTX's own .target wins over the device: an "a" target such as sm_90a matters to ptxas.
    target = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.MULTILINE)
    arch = target.group(1) if target else device.arch
    safe_name = re.sub(r"[^\w.-]", "_", name) or "kernel"
    try:
        handle, path = tempfile.mkstemp(prefix=f"tilec-{safe_name}-", suffix=".ptx")
        with os.fdopen(handle, "w") as file:
            file.write(ptx)
    except OSError as error:
        return f"(could not save the PTX for a repro: {error})"
    return f"Repro command: ptxas -arch={arch} {path}"


class Function:
    """A kernel of a loaded module, ready to launch."""

    def __init__(self, module: Module, name: str, handle: Any) -> None:
        self.module = module  # keeps the module loaded while the function lives
        self.name = name
        self.handle = handle
        self._device = module.device
        attribute = _cuda.CUfunction_attribute
        self._static_shared = self._attribute(attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
        self._max_threads = self._attribute(attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        self._dynamic_shared_limit = self._attribute(
            attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        self._marshallers: dict[tuple[ParamType, ...], _ParamMarshaller] = {}
        self._resident_clusters: dict[tuple, int] = {}
        # The marshallers' storage is shared state; the driver copies the values before the
        # launch call returns, so the lock is held only across marshal + launch.
        self.lock = threading.Lock()

    def attributes(self) -> dict[str, int]:
        """Resource use reported by the driver after JIT compilation."""
        attribute = _cuda.CUfunction_attribute
        return {
            "num_regs": self._attribute(attribute.CU_FUNC_ATTRIBUTE_NUM_REGS),
            "local_size_bytes": self._attribute(attribute.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
            "static_shared_bytes": self._attribute(attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            "max_threads_per_block": self._attribute(
                attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            "max_dynamic_shared_bytes": self._attribute(
                attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
            "ptx_version": self._attribute(attribute.CU_FUNC_ATTRIBUTE_PTX_VERSION),
            "binary_version": self._attribute(attribute.CU_FUNC_ATTRIBUTE_BINARY_VERSION),
        }

    def set_dynamic_shared_memory(self, nbytes: int) -> None:
        """Allow launches with up to `nbytes` of dynamic shared memory (beyond the 48 KiB
        default, up to the device's opt-in limit minus the kernel's static shared memory)."""
        limit = self._device.max_shared_memory_per_block_optin - self._static_shared
        if not 0 <= nbytes <= limit:
            raise ValueError(
                f"kernel {self.name!r} asks for {nbytes} bytes of dynamic shared memory, but "
                f"{self._device.arch} allows at most {limit} (opt-in limit "
                f"{self._device.max_shared_memory_per_block_optin} minus {self._static_shared} "
                f"static)")
        self._device.make_current()
        _call(_cuda.cuFuncSetAttribute, self.handle,
              _cuda.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
        self._dynamic_shared_limit = nbytes

    def check_launch(self, grid: Dim3, block: Dim3, shared_bytes: int,
                     cluster: Dim3 | None) -> None:
        """ValueError for a launch shape the driver would refuse (or worse, accept)."""
        grid_x, grid_y, grid_z = grid
        block_x, block_y, block_z = block
        if not (0 < grid_x <= _MAX_GRID_X and 0 < grid_y <= _MAX_GRID_YZ
                and 0 < grid_z <= _MAX_GRID_YZ):
            raise ValueError(f"kernel {self.name!r}: grid {tuple(grid)} is invalid; each dimension "
                             f"must be > 0, x <= {_MAX_GRID_X}, y and z <= {_MAX_GRID_YZ}")
        if not (0 < block_x <= _MAX_BLOCK[0] and 0 < block_y <= _MAX_BLOCK[1]
                and 0 < block_z <= _MAX_BLOCK[2]
                and block_x * block_y * block_z <= self._max_threads):
            raise ValueError(f"kernel {self.name!r}: block {tuple(block)} is invalid; each "
                             f"dimension must be > 0 (at most {_MAX_BLOCK}) and the product at "
                             f"most {self._max_threads} threads")
        if not 0 <= shared_bytes <= self._dynamic_shared_limit:
            raise ValueError(
                f"kernel {self.name!r}: {shared_bytes} bytes of dynamic shared memory requested, "
                f"the limit is {self._dynamic_shared_limit}; call set_dynamic_shared_memory() "
                f"first to raise it")
        if cluster is not None and not (
                len(cluster) == 3 and all(c > 0 and g % c == 0 for g, c in zip(grid, cluster))):
            raise ValueError(f"kernel {self.name!r}: cluster {tuple(cluster)} must be three "
                             f"positive sizes dividing the grid {tuple(grid)}")

    def resident_clusters(self, block: Dim3, shared_bytes: int, cluster: Dim3) -> int:
        """How many clusters of this shape the device holds at once
        (cuOccupancyMaxActiveClusters; once per shape): a cluster's blocks share one GPC, so
        where a GPC's SM count is no multiple of the cluster's blocks, some SMs hold none.
        0 where the device cannot hold one at all (the launch then says why)."""
        key = (tuple(block), shared_bytes, tuple(cluster))
        count = self._resident_clusters.get(key)
        if count is None:
            self._device.make_current()
            config = _launch_config(cluster, block, shared_bytes, _stream_handle(None), cluster)
            count = self._resident_clusters[key] = int(
                _call(_cuda.cuOccupancyMaxActiveClusters, self.handle, config))
        return count

    def marshaller(self, args: Sequence[KernelArg]) -> _ParamMarshaller:
        """The kernelParams layout for these arguments, built once per signature. Keyed by the
        arguments' classes, which hash by identity (a blob's size and alignment join the key):
        hashing the parameter types themselves on every launch cost microseconds."""
        key = tuple(map(type, args))
        if BlobArg in key:
            key = tuple(a.param_type if type(a) is BlobArg else type(a) for a in args)
        marshaller = self._marshallers.get(key)
        if marshaller is None:
            marshaller = self._marshallers[key] = _ParamMarshaller(signature(args))
        return marshaller

    def _attribute(self, attribute: Any) -> int:
        return int(_call(_cuda.cuFuncGetAttribute, attribute, self.handle))

    def __repr__(self) -> str:
        return f"Function({self.name!r} of module {self.module.name!r})"


Dim3 = tuple[int, int, int]


def launch(function: Function, grid: Dim3, block: Dim3, smem_bytes: int, stream: StreamLike,
           params: Sequence[KernelArg], cluster: Dim3 | None = None) -> None:
    """Enqueue `function` on `stream`: every launch in tilec goes through here.

    `params` are typed values (PtrArg, I32Arg, I64Arg, F32Arg, BlobArg) in the kernel's
    parameter order.
    With a `cluster` shape, the launch is `cuLaunchKernelEx` with a
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION attribute (thread block clusters, sm_90); without,
    `cuLaunchKernel`. Faults inside the kernel surface later, at a synchronize, as CudaError.
    """
    function.check_launch(grid, block, smem_bytes, cluster)
    marshaller = function.marshaller(params)
    handle = _stream_handle(stream)
    function._device.make_current()
    call = "cuLaunchKernel" if cluster is None else "cuLaunchKernelEx"
    config = None if cluster is None else _launch_config(grid, block, smem_bytes, handle,
                                                         cluster)
    with function.lock:
        address = marshaller.marshal(params)
        if config is None:
            err = _cuda.cuLaunchKernel(function.handle, *grid, *block, smem_bytes, handle,
                                       address, 0)[0]
        else:
            err = _cuda.cuLaunchKernelEx(config, function.handle, address, 0)[0]
    if err != 0:
        raise CudaError(err, call, hint=_launch_hint(function, grid, block, smem_bytes, cluster))


# Clusters of more blocks than this need CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED.
_PORTABLE_CLUSTER_BLOCKS = 8


def _launch_hint(function: Function, grid: Dim3, block: Dim3, smem_bytes: int,
                 cluster: Dim3 | None) -> str:
    """What a refused launch asked for; for a cluster, also the limits the driver enforces
    that check_launch cannot see (the device's capability and what one GPC holds at once)."""
    where = f", cluster {tuple(cluster)}" if cluster is not None else ""
    text = (f"kernel {function.name!r}, grid {tuple(grid)}, block {tuple(block)}{where}, "
            f"{smem_bytes} bytes of dynamic shared memory")
    if cluster is None:
        return text
    blocks = math.prod(cluster)
    capability = getattr(function._device, "compute_capability", None)
    device = ("this device has compute capability " + ".".join(map(str, capability))
              if capability else "the device's capability is unknown")
    return (f"{text}\nThe device refused a cluster of {blocks} blocks. Thread block clusters "
            f"need compute capability 9.0 or newer ({device}); clusters of more than "
            f"{_PORTABLE_CLUSTER_BLOCKS} blocks are not portable; and all the blocks of a "
            f"cluster must be resident on one GPC at once, each with {smem_bytes} bytes of "
            f"dynamic shared memory and {math.prod(block)} threads. Try a smaller cluster, "
            f"or fewer stages (less shared memory per block).")


def _launch_config(grid: Dim3, block: Dim3, smem_bytes: int, stream: Any,
                   cluster: Dim3) -> Any:
    """The CUlaunchConfig of a cluster launch (cuda.bindings.driver, as documented)."""
    attribute = _cuda.CUlaunchAttribute()
    attribute.id = _cuda.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    dims = attribute.value.clusterDim
    dims.x, dims.y, dims.z = cluster
    config = _cuda.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = smem_bytes
    config.hStream = stream
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


def _c_string(buffer: bytearray) -> str:
    return bytes(buffer).split(b"\0", 1)[0].decode(errors="replace").strip()


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
