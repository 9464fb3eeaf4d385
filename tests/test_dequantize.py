"""The dequantize pass and the launch's choice to convert 8-bit weights, without a GPU: which
tensors qualify (converted_weights), the IR after the pass, the spec mismatch it refuses,
that it cannot be disabled, and which launches convert (tilec.launch.packing.convert_to).
tests/gpu/test_dequantize_gpu.py runs converted launches against float64."""
from __future__ import annotations

from pathlib import Path

import pytest

from tilec.compiler import compile_kernel
from tilec.kernel import load_file, written_params
from tilec.launch.packing import DEQUANTIZE_MIN_ROWS, row_major_launch
from tilec.options import Options, Spec, TensorSpec
from tilec.passes.dequantize import converted_weights

from .test_wfp8a16 import sample as wfp8a16

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
PROGRAMS = Path(__file__).resolve().parent / "dequantize_programs.py"



@pytest.fixture(scope="module")
def programs():
    return load_file(PROGRAMS)


def w8a16():
    return load_file(SAMPLES / "w8a16.py")["w8a16"]


def spec(**dtypes) -> Spec:
    names = ("A", "W", "scale", "C")
    return Spec(tuple((name, TensorSpec(1, 8, dtypes.get(name))) for name in names))


def test_weights_converted_in_the_loop_are_listed_with_their_product_dtype(programs):
    assert {k: v.short for k, v in converted_weights(w8a16().lower()).items()} == {"W": "f16"}
    assert {k: v.short for k, v in converted_weights(
        wfp8a16("f8e4m3", "bf16").lower()).items()} == {"W": "bf16"}
    assert converted_weights(load_file(SAMPLES / "matmul.py")["matmul"].lower()) == {}
    int8 = load_file(SAMPLES / "int8_gemm.py")
    assert all(converted_weights(fn.lower()) == {} for fn in int8.values())  # i8 @ i8


def test_the_pass_leaves_its_input_alone():
    from tilec.ir.printer import print_kernel
    from tilec.passes import dequantize
    kernel = w8a16().lower()
    before = print_kernel(kernel, locs=True)
    result = dequantize.run(kernel, Options(arch="sm_90a", spec=spec(W="f16")))
    assert print_kernel(kernel, locs=True) == before
    assert result is not kernel and print_kernel(result, locs=True) != before


def test_the_pass_types_the_weight_as_converted_and_drops_its_cast():
    compiled = compile_kernel(w8a16().lower(), Options(arch="sm_90a", spec=spec(W="f16")),
                              keep_ir=True)
    ir = compiled.asm["dequantize"]
    assert "%W: tensor<f16,[N,K]>" in ir and "tensor.transpose %W : tensor<f16,[K,N]>" in ir
    assert "tile<i8" not in ir
    assert ir.count("tile.cast") == 1  # the epilogue's f32 -> f16 only
    assert compiled.kernel.schedule.tiling.kind == "wgmma"
    # Without a converted tensor in the spec the pass leaves the kernel alone.
    plain = compile_kernel(w8a16().lower(), Options(arch="sm_90a"), keep_ir=True)
    assert plain.asm["dequantize"] == plain.asm["cse"]  # its input
    # wgmma's register form converts the 8-bit weights in the K loop (swap_product's C.T).
    assert plain.kernel.schedule.tiling.kind == "wgmma_rs"


def test_a_spec_converting_what_the_kernel_does_not_read_converted_is_refused():
    with pytest.raises(ValueError, match="converts A to f16, which the kernel does not"):
        compile_kernel(w8a16().lower(), Options(arch="sm_90a", spec=spec(A="f16")))
    with pytest.raises(ValueError, match="converts W to bf16"):
        compile_kernel(w8a16().lower(), Options(arch="sm_90a", spec=spec(W="bf16")))


def test_the_pass_cannot_be_disabled():
    with pytest.raises(ValueError, match="'dequantize' cannot be disabled"):
        compile_kernel(w8a16().lower(), Options(arch="sm_90a", disable=("dequantize",)))


def sizes(m, n=512, k=256):
    return {"M": m, "N": n, "K": k}


@pytest.mark.parametrize("m, arch, policy, converted", [
    (DEQUANTIZE_MIN_ROWS, "sm_90a", "auto", "f16"),
    (DEQUANTIZE_MIN_ROWS - 1, "sm_90a", "auto", None),   # few rows re-read W: registers
    (16, "sm_90a", "always", "f16"),
    (4096, "sm_80", "auto", None),                      # mma.sync either way: registers
    (4096, "sm_90a", "off", None),
])
def test_a_k_contiguous_weight_converts_where_many_rows_re_read_it_on_sm_90a(
        m, arch, policy, converted):
    kernel = w8a16().lower()
    packing, launch_spec = row_major_launch(kernel, sizes(m), policy, written_params(kernel),
                                            arch)
    entry = {p.name: p for p in packing.tensors}.get("W")
    assert (entry.converted if entry is not None else None) == converted
    assert dict(launch_spec.tensors)["W"].dtype == converted
    compiled = compile_kernel(kernel, Options(arch=arch, spec=launch_spec, pack=policy))
    product = compiled.kernel.schedule.tiling.kind
    # On sm_90a the weights the launch keeps in 8 bits feed wgmma's register form (the
    # sample's BK 64: TMA's 64-byte swizzle), swapped by swap_product.
    assert product == {("sm_90a", True): "wgmma", ("sm_90a", False): "wgmma_rs"}.get(
        (arch, converted is not None), "mma")


def test_the_llvm_backend_keeps_w8a16_in_registers_on_sm_90a():
    """It emits no wgmma: the converted f16 product would run mma.sync as the registers'
    conversion does, so converting would only add the conversion's launch."""
    kernel = w8a16().lower()
    packing, launch_spec = row_major_launch(kernel, sizes(4096), "auto",
                                            written_params(kernel), "sm_90a", "llvm")
    assert not packing
    compiled = compile_kernel(kernel, Options(arch="sm_90a", spec=launch_spec, backend="llvm"))
    assert compiled.kernel.schedule.tiling.kind == "mma"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_an_n_contiguous_weight_is_always_converted_and_compiles(programs, arch):
    kernel = programs["kn"].lower()
    packing, launch_spec = row_major_launch(kernel, sizes(16), "auto", written_params(kernel),
                                            arch)
    assert [p.name for p in packing.tensors] == ["W"]
    assert "W converted to f16" in " ".join(packing.describe())
    compile_kernel(kernel, Options(arch=arch, spec=launch_spec))


@pytest.mark.parametrize("arch, converted", [("sm_80", "bf16"), ("sm_86", "bf16"),
                                              ("sm_90", None)])
def test_fp8_weights_convert_at_launch_where_registers_cannot(programs, arch, converted):
    """cvt.rn.f16x2.e4m3x2 needs sm_89: on sm_80/86 the launch converts; alone, the compile
    is a located error naming the arch."""
    from tilec.errors import TileError
    kernel = wfp8a16("f8e4m3", "bf16").lower()
    packing, launch_spec = row_major_launch(kernel, sizes(16), "auto", written_params(kernel),
                                            arch)
    assert {p.name: p.converted for p in packing.tensors}.get("W") == converted
    compile_kernel(kernel, Options(arch=arch, spec=launch_spec))
    if converted:
        with pytest.raises(TileError, match="needs sm_89 or later"):
            compile_kernel(kernel, Options(arch=arch))


@pytest.mark.parametrize("batch_stride_zero", [False, True])
def test_a_batch_of_weights_converts_as_one_2d_array(programs, batch_stride_zero):
    from tilec.launch.packing import plan_packing
    from tilec.runtime.arrays import ArrayArg, c_strides
    kernel = programs["batched_kn"].lower()
    shapes = {"A": (3, 1100, 100), "W": (3, 100, 130), "C": (3, 1100, 130)}
    dtypes = {"A": "f16", "W": "i8", "C": "f16"}
    tensors = {name: ArrayArg(name, 1 << 20, dtypes[name], shape, c_strides(shape), device=0)
               for name, shape in shapes.items()}
    if batch_stride_zero:  # one weight for every batch (an expanded tensor)
        tensors["W"] = ArrayArg("W", 1 << 20, "i8", (3, 100, 130), (0, 130, 1), device=0)
    packing = plan_packing(kernel, tensors, "auto", written_params(kernel), "sm_90a")
    entry = {p.name: p for p in packing.tensors}["W"]
    assert (entry.converted, entry.batches, entry.shared_batch) == ("f16", 3, batch_stride_zero)
    assert entry.argument_shape == (3, 100, 130) and entry.row_stride == 192
    assert entry.argument_strides == ((0 if batch_stride_zero else 100 * 192), 192, 1)


def test_without_conversion_the_n_contiguous_weight_is_a_located_error(programs):
    from tilec.errors import TileError
    kernel = programs["kn"].lower()
    _, launch_spec = row_major_launch(kernel, sizes(16), "off", written_params(kernel), "sm_90a")
    with pytest.raises(TileError, match="n contiguous") as err:
        compile_kernel(kernel, Options(arch="sm_90a", spec=launch_spec, pack="off"))
    assert "dequantize_programs.py:15:" in str(err.value)

