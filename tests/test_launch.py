"""Launch-side checks before any GPU work: arguments against the signature, the layout facts
a kernel is specialised on, and the grid, with arrays described only by their interfaces."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tilec.kernel import load_file
from tilec.launch.binding import bind_arguments, grid_size, launch_grid, spec_for, tensor_spec
from tilec.options import TensorSpec

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


class GpuArray:
    """Something exposing __cuda_array_interface__, as cupy or numba arrays do."""

    def __init__(self, shape, typestr="<f2", ptr=1 << 20, strides=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "version": 3,
                                         "strides": strides}


@pytest.fixture(scope="module")
def gemm():
    fn = load_file(SAMPLES / "gemm_epilogue.py")["gemm"]
    return fn.lower()


def bind(kernel, *args, **kwargs):
    return bind_arguments(kernel.params, kernel.symbols, args, kwargs)


def good_args():
    return [GpuArray((64, 32)), GpuArray((32, 48)), GpuArray((64, 48)),
            GpuArray((48,), "<f4"), 1.5, 0.5]


def test_consistent_arguments_bind_their_symbols(gemm):
    bound = bind(gemm, *good_args())
    assert bound.symbols == {"M": 64, "K": 32, "N": 48}
    assert bound.scalars == {"alpha": 1.5, "beta": 0.5}


@pytest.mark.parametrize("index, value, error, message", [
    (0, [[1.0]], TypeError, "argument 'A': expected a numpy array or a GPU array"),
    (0, GpuArray((64, 32), "<f4"), TypeError, "argument 'A': expected dtype f16, got"),
    (0, GpuArray((64,)), ValueError, "argument 'A': expected a 2-D array [M, K]"),
    (1, GpuArray((33, 48)), ValueError,
     "argument 'B' has K=33 (dim 0) but argument 'A' has K=32 (dim 1); shapes must agree"),
    (3, GpuArray((47,), "<f4"), ValueError, "argument 'bias' has N=47"),
    (4, "1.5", TypeError, "argument 'alpha': expected a f32 number, got str"),
    (4, True, TypeError, "argument 'alpha': expected a f32 number, got bool"),
])
def test_bad_arguments_are_named(gemm, index, value, error, message):
    args = good_args()
    args[index] = value
    with pytest.raises(error) as err:
        bind(gemm, *args)
    assert message in str(err.value)


def test_missing_extra_and_unknown_arguments(gemm):
    with pytest.raises(TypeError, match="missing argument"):
        bind(gemm, *good_args()[:5])
    with pytest.raises(TypeError, match="6 arguments expected"):
        bind(gemm, *good_args(), 1.0)
    with pytest.raises(TypeError, match="unknown argument 'gamma'"):
        bind(gemm, *good_args(), gamma=1.0)


def test_layout_facts_follow_strides_and_alignment():
    assert tensor_spec(_arg((64, 32), (32, 1), 1 << 20)) == TensorSpec(1, 8)
    assert tensor_spec(_arg((64, 32), (1, 64), 1 << 20)) == TensorSpec(0, 8)    # column-major
    assert tensor_spec(_arg((64, 33), (33, 1), 1 << 20)) == TensorSpec(1, 1)    # odd rows
    assert tensor_spec(_arg((64, 32), (34, 1), 1 << 20)) == TensorSpec(1, 2)    # 4-byte rows
    assert tensor_spec(_arg((64, 32), (32, 1), (1 << 20) + 8)) == TensorSpec(1, 4)
    assert tensor_spec(_arg((64, 32), (64, 2), 1 << 20)) == TensorSpec(None, 1)  # no unit dim
    # Two unit strides: the dim of one index is the inner one (a dense array's other dim has
    # unit stride only past it), so a column-major [1, N] is k contiguous, a row-major [K, 1]
    # n contiguous; a row-major [1, N] has one unit stride.
    assert tensor_spec(_arg((1, 32), (1, 1), 1 << 20)) == TensorSpec(0, 1)
    assert tensor_spec(_arg((64, 1), (1, 1), 1 << 20)) == TensorSpec(1, 1)
    assert tensor_spec(_arg((1, 32), (32, 1), 1 << 20)) == TensorSpec(1, 8)
    assert tensor_spec(_arg((3, 1, 32), (32, 1, 1), 1 << 20)) == TensorSpec(1, 1)
    # A batch dim of one index with unit stride (a permuted [M, K, 1]) is not the inner one.
    assert tensor_spec(_arg((1, 64, 32), (1, 32, 1), 1 << 20)).contiguous_dim == 2


def _arg(shape, strides, ptr):
    from tilec.runtime.arrays import ArrayArg
    return ArrayArg(name="X", ptr=ptr, dtype="f16", shape=shape, strides=strides, device=0,
                    host=None, readonly=False, keepalive=None)


def test_spec_records_what_the_sizes_divide(gemm):
    spec = spec_for(bind(gemm, *good_args()))
    assert dict(spec.divisible) == {"K": 32, "M": 64, "N": 16}
    assert spec.divides("M", 64) and not spec.divides("N", 32)


def test_grid_is_computed_on_the_host_and_folded_for_raster_order():
    fn = load_file(SAMPLES / "matmul.py")["matmul"]
    kernel = fn.lower()
    assert grid_size(kernel, {"M": 300, "N": 129, "K": 7}) == [3, 2]
    compiled = fn.compile()
    # Grouped rasterization folds the two grid axes into one, decoded in the kernel.
    assert launch_grid([3, 2], compiled.kernel) == (6, 1, 1)
    assert "%ctaid.x" in compiled.ptx and "%ctaid.y" not in compiled.ptx


def test_numpy_arguments_bind_too(gemm):
    args = good_args()
    args[0] = np.zeros((64, 32), np.float16)
    assert bind(gemm, *args).tensors["A"].device is None
