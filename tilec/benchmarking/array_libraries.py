"""The array library behind the inputs and cuBLAS: torch, else cupy. The benchmark reaches
either through :class:`Arrays`, so the CPU tests can hand it a numpy stand-in."""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Protocol

FALLBACK_L2_BYTES = 64 * 2**20  # when the array library cannot say



def to_float64(array: Any) -> Any:
    """A torch tensor or numpy array in float64, for a reference computed beside it."""
    return array.double() if hasattr(array, "double") else array.astype("float64")

class Arrays(Protocol):
    """What the benchmark needs from torch or cupy (tests give it a numpy fake)."""

    name: str
    version: str
    l2_bytes: int
    tf32: bool  # whether cuBLAS may round f32 products' inputs to TF32

    def unsupported(self, dtype: str) -> Optional[str]: ...
    # k_major (i8 B): a column-major [K, N], the transpose of a row-major [N, K].
    def random(self, shape: tuple[int, ...], dtype: str, k_major: bool = False) -> Any: ...
    def empty(self, shape: tuple[int, ...], dtype: str) -> Any: ...
    def poison(self, array: Any) -> None: ...
    def reference(self, a: Any, b: Any) -> Any: ...
    def rel_error(self, out: Any, ref: Any) -> float: ...
    def all_finite(self, array: Any) -> bool: ...
    def matmul(self, a: Any, b: Any, out: Any, tf32: bool = False,
               fast_accumulation: bool = True) -> None: ...
    def copy(self, dst: Any, src: Any) -> None: ...
    def reader(self, nbytes: int) -> Callable[[], None]: ...
    def synchronize(self) -> None: ...
    def event(self) -> Any: ...
    def elapsed_ms(self, start: Any, end: Any) -> float: ...
    def release(self) -> None: ...


class TorchArrays:
    """Arrays and cuBLAS through PyTorch, on tilec's device."""

    name = "torch"

    def __init__(self, ordinal: int) -> None:
        import torch
        self.torch = torch
        self.device = torch.device("cuda", ordinal)
        torch.cuda.set_device(self.device)
        # cuBLAS f32 products in full f32, so the f32 rows show the target, not TF32's speed.
        torch.backends.cuda.matmul.allow_tf32 = False
        self.tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
        self.version = torch.__version__
        self.l2_bytes = int(getattr(torch.cuda.get_device_properties(self.device),
                                    "L2_cache_size", 0) or FALLBACK_L2_BYTES)
        # tf32 cases hold f32 arrays; only their products differ (matmul's tf32).
        self.dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
                       "tf32": torch.float32, "i8": torch.int8, "i32": torch.int32}
        if hasattr(torch, "float8_e4m3fn"):  # torch 2.1 and later
            self.dtypes["f8e4m3"] = torch.float8_e4m3fn
        # torch._scaled_mm's per-tensor scales: 1, so its C is the plain product.
        self.unit_scale = torch.ones((), dtype=torch.float32, device=self.device)

    def unsupported(self, dtype: str) -> Optional[str]:
        if dtype == "f8e4m3" and dtype not in self.dtypes:
            return f"torch {self.version} has no float8_e4m3fn"
        return None

    def random(self, shape: tuple[int, ...], dtype: str, k_major: bool = False) -> Any:
        stored = shape[::-1] if k_major else shape
        if dtype == "i8":  # every i8 value
            values = self.torch.randint(-128, 128, stored, dtype=self.torch.int8,
                                        device=self.device)
        elif dtype == "f8e4m3":  # standard normal values rounded to e4m3
            values = self.torch.randn(stored, device=self.device).to(self.dtypes[dtype])
        else:
            return self.torch.randn(shape, dtype=self.dtypes[dtype], device=self.device)
        return values.t() if k_major else values

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.empty(shape, dtype=self.dtypes[dtype], device=self.device)

    def poison(self, array: Any) -> None:
        if array.dtype.is_floating_point:
            array.fill_(float("nan"))
        else:  # integers have no NaN: the most negative value (the checks are exact)
            array.fill_(self.torch.iinfo(array.dtype).min)

    def reference(self, a: Any, b: Any) -> Any:
        return a.float().double() @ b.float().double()  # float8 widens through float32

    def rel_error(self, out: Any, ref: Any) -> float:
        norm = self.torch.linalg.vector_norm
        diff = float(norm(out.double() - ref))  # NaN anywhere in out gives NaN
        scale = float(norm(ref))
        return diff / scale if scale > 0 else diff

    def all_finite(self, array: Any) -> bool:
        return bool(self.torch.isfinite(array).all())

    def matmul(self, a: Any, b: Any, out: Any, tf32: bool = False,
               fast_accumulation: bool = True) -> None:
        """``out = a @ b``; ``tf32`` allows cuBLAS TF32 tensor cores for this product only
        (the tf32 rows), and the flag is restored after, so the f32 rows stay exact;
        ``fast_accumulation``: fp8 products' (use_fast_accum)."""
        if str(getattr(a, "dtype", "")) == "torch.int8":  # i8 @ i8 -> exact i32 (cuBLASLt)
            self.torch._int_mm(a, b, out=out)
            return
        if str(getattr(a, "dtype", "")) == "torch.float8_e4m3fn":  # cuBLASLt's fp8 GEMM
            # Fast accumulation is what tilec's wgmma8 kernels do by default (the sums kept in
            # the tensor cores' own accumulator): H100, 4096^3 / 8192^3, both contenders'
            # errors against float64 1.35e-3 / 2.06e-3; without it (tilec's promoted
            # accumulation) 2.43e-4 for both, 5-7% slower (NOTES, session 16).
            self.torch._scaled_mm(a, b, scale_a=self.unit_scale, scale_b=self.unit_scale,
                                  out_dtype=out.dtype, out=out,
                                  use_fast_accum=fast_accumulation)
            return
        flags = self.torch.backends.cuda.matmul
        previous = flags.allow_tf32
        flags.allow_tf32 = tf32
        try:
            self.torch.matmul(a, b, out=out)
        finally:
            flags.allow_tf32 = previous

    def copy(self, dst: Any, src: Any) -> None:
        dst.copy_(src)

    def reader(self, nbytes: int) -> Callable[[], None]:
        """A step that reads ``nbytes`` of device memory and writes next to nothing (a sum
        of ones): the timer's L2 flush."""
        buffer = self.torch.ones(max(1, nbytes // 4), dtype=self.torch.int32,
                                 device=self.device)
        return lambda: buffer.sum()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def event(self) -> Any:
        return self.torch.cuda.Event(enable_timing=True)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(start.elapsed_time(end))

    def release(self) -> None:
        self.torch.cuda.empty_cache()


class CupyArrays:
    """Arrays and cuBLAS through CuPy, on tilec's device (no bfloat16 there)."""

    name = "cupy"

    def __init__(self, ordinal: int) -> None:
        import cupy
        self.cupy = cupy
        cupy.cuda.Device(ordinal).use()
        # CuPy's cuBLAS calls use TF32 only when CUPY_TF32=1 is set (the f32 checks catch it).
        self.tf32 = os.environ.get("CUPY_TF32", "0") != "0"
        self.version = cupy.__version__
        properties = cupy.cuda.runtime.getDeviceProperties(ordinal)
        self.l2_bytes = int(properties.get("l2CacheSize", 0) or FALLBACK_L2_BYTES)
        self.dtypes = {"f16": cupy.float16, "f32": cupy.float32, "tf32": cupy.float32}

    def unsupported(self, dtype: str) -> Optional[str]:
        if dtype == "tf32" and not self.tf32:
            return "cupy allows TF32 only process-wide (CUPY_TF32=1 before importing cupy)"
        if dtype in ("i8", "f8e4m3"):
            return f"the {dtype} rows compare with torch's int8 / fp8 GEMMs: they need torch"
        return None if dtype in self.dtypes else "cupy has no bfloat16 arrays"

    def random(self, shape: tuple[int, ...], dtype: str, k_major: bool = False) -> Any:
        values = self.cupy.random.standard_normal(shape, dtype=self.cupy.float32)
        return values.astype(self.dtypes[dtype])

    def empty(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.cupy.empty(shape, dtype=self.dtypes[dtype])

    def poison(self, array: Any) -> None:
        array.fill(float("nan"))

    def reference(self, a: Any, b: Any) -> Any:
        return a.astype(self.cupy.float64) @ b.astype(self.cupy.float64)

    def rel_error(self, out: Any, ref: Any) -> float:
        norm = self.cupy.linalg.norm
        diff = float(norm((out.astype(self.cupy.float64) - ref).ravel()))
        scale = float(norm(ref.ravel()))
        return diff / scale if scale > 0 else diff

    def all_finite(self, array: Any) -> bool:
        return bool(self.cupy.isfinite(array).all())

    def matmul(self, a: Any, b: Any, out: Any, tf32: bool = False,
               fast_accumulation: bool = True) -> None:
        # TF32 follows CUPY_TF32 for every product (unsupported() refuses tf32 rows without).
        self.cupy.matmul(a, b, out=out)

    def copy(self, dst: Any, src: Any) -> None:
        dst.data.copy_from_device_async(src.data, src.nbytes)

    def reader(self, nbytes: int) -> Callable[[], None]:
        buffer = self.cupy.ones(max(1, nbytes // 4), dtype=self.cupy.int32)
        return lambda: buffer.sum()

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def event(self) -> Any:
        return self.cupy.cuda.Event()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(self.cupy.cuda.get_elapsed_time(start, end))

    def release(self) -> None:
        self.cupy.get_default_memory_pool().free_all_blocks()


def open_arrays(ordinal: int) -> Arrays:
    """torch if it imports, else cupy; raises ImportError saying how to get one."""
    try:
        return TorchArrays(ordinal)
    except ImportError:
        pass
    try:
        return CupyArrays(ordinal)
    except ImportError:
        raise ImportError("tilec bench needs torch or cupy for the inputs and cuBLAS: "
                          "python -m pip install torch") from None
