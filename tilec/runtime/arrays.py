"""Turning user arguments into device pointers.

`as_array_arg` accepts numpy arrays (host memory, staged through `HostStaging`), objects with
`__cuda_array_interface__` (CuPy, PyTorch, Numba) and DLPack producers (PyTorch bf16, JAX, ...),
and describes each as an `ArrayArg`: pointer, dtype, shape and strides in elements. Describing an
argument never dereferences its pointer, so it works (and is tested) without a GPU.

Dtypes are named by tilec's own strings: "f16", "bf16", "f32", "i32".
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from tilec.runtime import driver
from tilec.target import fp8
from tilec.target.bf16 import from_bf16_bits, to_bf16_bits  # noqa: F401 (re-exported)

DTYPES = ("f16", "bf16", "f32", "i32", "i8", "f8e4m3", "f8e5m2")
ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4, "i32": 4, "i8": 1, "f8e4m3": 1, "f8e5m2": 1}
# 8-bit floats: taken from torch float8 tensors and ml_dtypes arrays by name, and from
# uint8 arrays of their bits wherever the kernel declares the tensor f8e4m3 or f8e5m2.
FP8 = ("f8e4m3", "f8e5m2")
_FP8_BY_NAME = {**{name: dtype for dtype, name in fp8.ML_DTYPES_NAMES.items()},
                **{name: dtype for dtype, name in fp8.TORCH_NAMES.items()}}
BITS = "u8"  # a uint8 array: fp8 bits, when the parameter is fp8

# Array-interface typestrs, as numpy's `dtype.str` and __cuda_array_interface__ spell them.
_FROM_TYPESTR = {"<f2": "f16", "<f4": "f32", "<i4": "i32", "|i1": "i8", "|u1": BITS}
# DLPack (type code, bits): kDLInt = 0, kDLFloat = 2, kDLBfloat = 4.
_FROM_DLPACK = {(2, 16): "f16", (2, 32): "f32", (4, 16): "bf16", (0, 32): "i32", (0, 8): "i8"}
_DLPACK_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}
_KDLCPU = 1
_KDLCUDA = 2


@dataclass(frozen=True)
class ArrayArg:
    """One array argument, described for a launch.

    `strides` are in elements. `device` is the CUDA ordinal, or None for host memory, in which
    case `host` is the user's numpy array (or a numpy view of the producer's host memory) that
    `HostStaging` copies in and, for written arguments, back into in place. `keepalive` holds
    whatever owns the memory (the producer object, a DLPack capsule, a DeviceBuffer).
    """

    name: str
    ptr: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    device: int | None
    host: np.ndarray | None = field(default=None, repr=False, compare=False)
    readonly: bool = False
    keepalive: Any = field(default=None, repr=False, compare=False)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_c_contiguous(self) -> bool:
        return self.size == 0 or all(
            extent == 1 or stride == expected
            for extent, stride, expected in zip(self.shape, self.strides, c_strides(self.shape)))


def c_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides, in elements, of an array of `shape`."""
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


class _Described(NamedTuple):
    """What a producer told us, before tilec's checks: strides are still in bytes and `dtype`
    is None when the producer's dtype has no tilec name (`dtype_label` names it for errors)."""

    ptr: int
    dtype: str | None
    dtype_label: str
    shape: tuple[int, ...]
    byte_strides: tuple[int, ...]
    device: int | None
    host: np.ndarray | None
    readonly: bool
    keepalive: Any


def as_array_arg(obj: Any, name: str, expected_dtype: str | None = None,
                 expected_rank: int | None = None, *,
                 dim_names: Sequence[str] | None = None) -> ArrayArg:
    """Describe `obj` as an ArrayArg, checking dtype, rank, strides and device.

    `dim_names` (e.g. ["M", "K"]) only make rank errors read better.
    """
    if expected_dtype is not None and expected_dtype not in DTYPES:
        raise ValueError(f"expected_dtype must be one of {DTYPES}, got {expected_dtype!r}")
    described = _describe(obj, name)
    if described.dtype == BITS and expected_dtype in FP8:
        described = described._replace(dtype=expected_dtype)
    _check_dtype(described, name, expected_dtype)
    _check_rank(described, name, expected_rank, dim_names)
    strides = _element_strides(described, name)
    if described.device is not None:
        tilec_device = driver.configured_device_ordinal()
        if described.device != tilec_device:
            raise ValueError(f"argument {name!r} lives on cuda:{described.device} but tilec runs "
                             f"on cuda:{tilec_device}")
    return ArrayArg(name=name, ptr=described.ptr, dtype=described.dtype, shape=described.shape,
                    strides=strides, device=described.device, host=described.host,
                    readonly=described.readonly, keepalive=described.keepalive)


def _describe(obj: Any, name: str) -> _Described:
    if isinstance(obj, np.ndarray):
        return _from_numpy(obj)
    if type(obj).__name__ == "Tensor" and type(obj).__module__.startswith("torch"):
        described = _from_torch_cuda(obj)
        if described is not None:
            return described
    has_dlpack = hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
    interface = _cuda_array_interface(obj)
    if interface is not None:
        described = _from_cuda_array_interface(obj, interface, name)
        # CAI has no typestr for bf16 (PyTorch exports it as raw "<V2"); DLPack names it.
        if described.dtype is None and has_dlpack:
            return _from_dlpack(obj, name)
        return described
    if has_dlpack:
        return _from_dlpack(obj, name)
    raise TypeError(f"argument {name!r}: expected a numpy array or a GPU array "
                    f"(__cuda_array_interface__ or DLPack), got {type(obj).__name__}")


def _check_dtype(described: _Described, name: str, expected: str | None) -> None:
    if expected is not None and described.dtype != expected:
        raise TypeError(f"argument {name!r}: expected dtype {expected}, got "
                        f"{described.dtype_label}")
    if described.dtype is None or described.dtype == BITS:
        raise TypeError(f"argument {name!r}: unsupported dtype {described.dtype_label}; tilec "
                        f"takes {', '.join(DTYPES)} (bf16 from numpy as ml_dtypes.bfloat16; "
                        "f8e4m3 and f8e5m2 as uint8 bits, ml_dtypes or torch float8)")


def _check_rank(described: _Described, name: str, expected: int | None,
                dim_names: Sequence[str] | None) -> None:
    if expected is None or len(described.shape) == expected:
        return
    dims = f" [{', '.join(dim_names)}]" if dim_names else ""
    raise ValueError(f"argument {name!r}: expected a {expected}-D array{dims}, got shape "
                     f"{described.shape}")


def _element_strides(described: _Described, name: str) -> tuple[int, ...]:
    if any(stride < 0 for stride in described.byte_strides):
        raise ValueError(f"argument {name!r} has a negative stride (byte strides "
                         f"{described.byte_strides}); pass a copy (numpy.ascontiguousarray, "
                         f"tensor.contiguous())")
    itemsize = ITEMSIZE[described.dtype]
    if any(stride % itemsize for stride in described.byte_strides):
        raise ValueError(f"argument {name!r} has byte strides {described.byte_strides} that are "
                         f"not multiples of its element size {itemsize}; pass a copy")
    return tuple(stride // itemsize for stride in described.byte_strides)


# --- torch ------------------------------------------------------------------------------------

_TORCH_DTYPES = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32",
                 "torch.int32": "i32", "torch.int8": "i8", **{
                     name: dtype for dtype, name in fp8.TORCH_NAMES.items()}}


def _from_torch_cuda(tensor: Any) -> _Described | None:
    """A CUDA torch tensor read through its own accessors: building its
    __cuda_array_interface__ costs tens of microseconds a call, this a few. None for tensors
    this path does not cover (CPU tensors, other dtypes): the generic protocols take them."""
    device = tensor.device
    dtype = _TORCH_DTYPES.get(str(tensor.dtype))
    if device.type != "cuda" or dtype is None:
        return None
    itemsize = ITEMSIZE[dtype]
    return _Described(ptr=tensor.data_ptr(), dtype=dtype, dtype_label=str(tensor.dtype),
                      shape=tuple(tensor.shape),
                      byte_strides=tuple(s * itemsize for s in tensor.stride()),
                      device=device.index if device.index is not None else 0, host=None,
                      readonly=False, keepalive=tensor)


# --- numpy -----------------------------------------------------------------------------------

def _numpy_dtype_name(dtype: np.dtype) -> str | None:
    # ml_dtypes' bfloat16 calls itself "bfloat16"; matching by name keeps ml_dtypes optional.
    # A plain uint16 array is never taken as bf16: its bits could mean anything.
    if dtype.name == "bfloat16":
        return "bf16"
    if dtype.name in _FP8_BY_NAME:  # ml_dtypes.float8_e4m3fn, float8_e5m2
        return _FP8_BY_NAME[dtype.name]
    return _FROM_TYPESTR.get(dtype.str)


def _from_numpy(array: np.ndarray) -> _Described:
    return _Described(
        ptr=array.ctypes.data, dtype=_numpy_dtype_name(array.dtype), dtype_label=str(array.dtype),
        shape=tuple(array.shape), byte_strides=tuple(array.strides), device=None, host=array,
        readonly=not array.flags.writeable, keepalive=None)


def _host_numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype used for host views of producer memory (bf16 needs ml_dtypes, else its
    raw bits as uint16: staging only moves bytes)."""
    if dtype == "bf16":
        try:
            import ml_dtypes
        except ImportError:
            return np.dtype(np.uint16)
        return np.dtype(ml_dtypes.bfloat16)
    return {"f16": np.dtype(np.float16), "f32": np.dtype(np.float32),
            "i32": np.dtype(np.int32), "i8": np.dtype(np.int8), "f8e4m3": np.dtype(np.uint8),
            "f8e5m2": np.dtype(np.uint8)}[dtype]


# --- __cuda_array_interface__ ----------------------------------------------------------------

def _cuda_array_interface(obj: Any) -> dict[str, Any] | None:
    try:
        return obj.__cuda_array_interface__
    except AttributeError:
        return None
    except Exception:
        # Some producers raise for dtypes CAI cannot express (older PyTorch for bf16).
        if hasattr(obj, "__dlpack__"):
            return None
        raise


def _from_cuda_array_interface(obj: Any, interface: dict[str, Any], name: str) -> _Described:
    version = interface.get("version")
    if version not in (2, 3):
        raise ValueError(f"argument {name!r}: __cuda_array_interface__ version {version} is not "
                         f"supported (2 or 3)")
    if interface.get("mask") is not None:
        raise ValueError(f"argument {name!r}: masked GPU arrays are not supported")
    shape = tuple(int(extent) for extent in interface["shape"])
    typestr = interface["typestr"]
    dtype = _FROM_TYPESTR.get(typestr)
    try:
        label = np.dtype(typestr).name
    except TypeError:
        label = typestr
    itemsize = ITEMSIZE.get(dtype, 1)  # fp8 bits (BITS) and unknown dtypes: bytes
    raw_strides = interface.get("strides")
    if raw_strides is None:
        byte_strides = tuple(stride * itemsize for stride in c_strides(shape))
    else:
        byte_strides = tuple(int(stride) for stride in raw_strides)
    ptr, readonly = interface["data"]
    _wait_for_producer_stream(interface.get("stream"))
    return _Described(ptr=int(ptr), dtype=dtype, dtype_label=label, shape=shape,
                      byte_strides=byte_strides, device=_cai_device(obj, int(ptr)), host=None,
                      readonly=bool(readonly), keepalive=obj)


def _cai_device(obj: Any, ptr: int) -> int:
    # The producer's own device object answers without a driver call: torch's device.index,
    # CuPy's device.id.
    device = getattr(obj, "device", None)
    for attribute in ("index", "id"):
        ordinal = getattr(device, attribute, None)
        if isinstance(ordinal, int):
            return ordinal
    if ptr and driver.has_gpu():
        return driver.pointer_device_ordinal(ptr)
    # A null pointer (zero-size array) or no driver to ask: nothing says it is elsewhere.
    return driver.configured_device_ordinal()


def _wait_for_producer_stream(stream: Any) -> None:
    # CAI v3: 1 and 2 are the legacy and per-thread default streams, both ordered with tilec's
    # launches on the legacy stream. Any other stream may be non-blocking, so wait for its work.
    if stream is None or stream in (1, 2) or not driver.has_gpu():
        return
    driver.Stream.wrap(int(stream)).synchronize()


# --- DLPack ----------------------------------------------------------------------------------
# Layouts from dlpack.h (v1.x); ctypes reads the producer's structs in place.

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # in elements; NULL means row-major
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    """The legacy capsule payload, named "dltensor"."""

    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    """The DLPack >= 1.0 capsule payload, named "dltensor_versioned"."""

    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", _DLTensor)]


_DLPACK_FLAG_READ_ONLY = 1 << 0

# Own prototypes rather than setting argtypes on ctypes.pythonapi, which other code shares.
_capsule_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


@dataclass(frozen=True)
class DLPackView:
    """The fields of a DLPack capsule that tilec needs; `ptr` includes the byte offset and
    `strides` are in elements (filled in as row-major when the producer gave none)."""

    device_type: int
    device_id: int
    ptr: int
    type_code: int
    bits: int
    lanes: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    readonly: bool

    @property
    def dtype_label(self) -> str:
        kind = _DLPACK_CODE_NAMES.get(self.type_code, f"code{self.type_code}_")
        lanes = f"x{self.lanes}" if self.lanes != 1 else ""
        return f"{kind}{self.bits}{lanes}"


def parse_dlpack_capsule(capsule: Any) -> DLPackView:
    """Read a DLPack capsule without consuming it.

    The capsule is left un-renamed, so its own destructor still runs the producer's deleter;
    whoever holds the capsule (ArrayArg.keepalive) therefore keeps the memory alive.
    """
    if type(capsule).__name__ != "PyCapsule":
        raise TypeError(f"__dlpack__ returned {type(capsule).__name__}, not a PyCapsule")
    name = _capsule_get_name(capsule)
    if name == b"dltensor":
        managed = _DLManagedTensor.from_address(_capsule_get_pointer(capsule, name))
        tensor, readonly = managed.dl_tensor, False
    elif name == b"dltensor_versioned":
        versioned = _DLManagedTensorVersioned.from_address(_capsule_get_pointer(capsule, name))
        if versioned.version.major != 1:
            raise ValueError(f"DLPack ABI version {versioned.version.major} is not supported (1)")
        tensor = versioned.dl_tensor
        readonly = bool(versioned.flags & _DLPACK_FLAG_READ_ONLY)
    elif name in (b"used_dltensor", b"used_dltensor_versioned"):
        raise ValueError("this DLPack capsule was already consumed")
    else:
        raise TypeError(f"not a DLPack capsule (capsule name {name!r})")
    shape = tuple(tensor.shape[index] for index in range(tensor.ndim))
    if tensor.strides:
        strides = tuple(tensor.strides[index] for index in range(tensor.ndim))
    else:
        strides = c_strides(shape)
    return DLPackView(
        device_type=tensor.device.device_type, device_id=tensor.device.device_id,
        ptr=(tensor.data or 0) + tensor.byte_offset, type_code=tensor.dtype.code,
        bits=tensor.dtype.bits, lanes=tensor.dtype.lanes, shape=shape, strides=strides,
        readonly=readonly)


def _export_dlpack(obj: Any, stream: int | None) -> Any:
    try:
        return obj.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:
        # Producers older than DLPack 1.0 know no max_version and export the legacy capsule.
        return obj.__dlpack__(stream=stream)


def _from_dlpack(obj: Any, name: str) -> _Described:
    device_type, device_id = obj.__dlpack_device__()
    if device_type == _KDLCUDA:
        # Stream 1 names the legacy default stream that tilec launches on: the producer makes
        # it wait for its pending writes before handing the memory over.
        stream = 1
    elif device_type == _KDLCPU:
        stream = None
    else:
        raise ValueError(f"argument {name!r} lives on DLPack device type {int(device_type)}; "
                         f"tilec takes CUDA device memory (2) or host memory (1)")
    capsule = _export_dlpack(obj, stream)
    view = parse_dlpack_capsule(capsule)
    dtype = _FROM_DLPACK.get((view.type_code, view.bits)) if view.lanes == 1 else None
    itemsize = ITEMSIZE[dtype] if dtype else 1
    byte_strides = tuple(stride * itemsize for stride in view.strides)
    keepalive = (obj, capsule)
    if view.device_type == _KDLCPU:
        host = _host_view(view, dtype, byte_strides) if dtype else None
        return _Described(ptr=view.ptr, dtype=dtype, dtype_label=view.dtype_label,
                          shape=view.shape, byte_strides=byte_strides, device=None, host=host,
                          readonly=view.readonly, keepalive=keepalive)
    return _Described(ptr=view.ptr, dtype=dtype, dtype_label=view.dtype_label, shape=view.shape,
                      byte_strides=byte_strides, device=view.device_id, host=None,
                      readonly=view.readonly, keepalive=keepalive)


def _host_view(view: DLPackView, dtype: str, byte_strides: tuple[int, ...]) -> np.ndarray | None:
    """A zero-copy numpy view of host DLPack memory, so written results land in the producer's
    own array. None when strides are negative (reported by the stride check)."""
    numpy_dtype = _host_numpy_dtype(dtype)
    if any(extent == 0 for extent in view.shape):
        return np.empty(view.shape, numpy_dtype)
    if any(stride < 0 for stride in byte_strides):
        return None
    extent = sum((size - 1) * stride for size, stride in zip(view.shape, byte_strides))
    memory = (ctypes.c_char * (extent + numpy_dtype.itemsize)).from_address(view.ptr)
    host = np.ndarray(view.shape, numpy_dtype, buffer=memory, strides=byte_strides)
    if view.readonly:
        host.flags.writeable = False
    return host


# --- host staging ----------------------------------------------------------------------------

class HostStaging:
    """Device copies of host (numpy) arguments for one launch.

    Strided host views are made contiguous for the device (the staged ArrayArg has row-major
    strides), which keeps the device copy as small as the data; results are copied back through
    a contiguous buffer and assigned into the user's array, so its identity and any view
    semantics are preserved. Two host arguments that alias each other get separate device
    copies: a kernel writing one does not see it through the other.

        with HostStaging() as staging:
            a = staging.to_device(a_arg, written=False)
            c = staging.to_device(c_arg, written=True)
            launch(function, ..., [PtrArg(a.ptr), PtrArg(c.ptr), ...])
            staging.copy_back()
    """

    def __init__(self) -> None:
        self._buffers: list[driver.DeviceBuffer] = []
        self._writebacks: list[tuple[np.ndarray, driver.DeviceBuffer]] = []

    def to_device(self, arg: ArrayArg, *, written: bool) -> ArrayArg:
        """The device form of `arg`: a GPU argument as is, a host one copied to a new buffer."""
        if written and arg.readonly:
            raise ValueError(f"argument {arg.name!r} is read-only but the kernel writes it")
        if arg.device is not None:
            return arg
        if arg.host is None:
            raise ValueError(f"argument {arg.name!r} is host memory without a numpy view")
        contiguous = np.ascontiguousarray(arg.host)
        buffer = driver.DeviceBuffer(contiguous.nbytes)
        self._buffers.append(buffer)
        buffer.copy_from_host(contiguous)
        if written:
            self._writebacks.append((arg.host, buffer))
        return ArrayArg(name=arg.name, ptr=buffer.ptr, dtype=arg.dtype, shape=arg.shape,
                        strides=c_strides(arg.shape), device=driver.current_device().ordinal,
                        host=None, readonly=arg.readonly, keepalive=buffer)

    def copy_back(self) -> None:
        """Wait for the launch, copy written arguments into the users' arrays, free buffers.

        The context-wide synchronize is also where a kernel fault surfaces, as CudaError.
        """
        driver.synchronize()
        for host, buffer in self._writebacks:
            if host.flags.c_contiguous:
                buffer.copy_to_host(host)
            else:
                result = np.empty(host.shape, host.dtype)
                buffer.copy_to_host(result)
                host[...] = result
        self.free()

    def free(self) -> None:
        for buffer in self._buffers:
            buffer.free()
        self._buffers.clear()
        self._writebacks.clear()

    def __enter__(self) -> HostStaging:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.free()
