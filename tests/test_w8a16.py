"""Weight-only quantization (w8a16, issue 13): i8 weights W[N, K] converted to f16/bf16 in
registers, ``acc += A @ W.T[...].to(f16)``, per-channel scales in the epilogue.

The i8 shared tile and frag.ldbytes (one ld.shared.u16 per m16n8k16 B register) against the
PTX ISA's fragment table; the conversion PTX evaluated bit for bit over every byte pair; the
lowered kernel run by the CPU executor at ragged sizes against float64 (f16 and bf16
activations, several tiles, sm_80 and sm_90a); the errors; explain; ptxas on every target
(also in tests/test_ptxas.py). tests/gpu/test_w8a16_gpu.py runs the sample on a GPU.
"""
from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError
from tilec.families.byte_operands import pair_coord
from tilec.families.catalogue import op_catalogue
from tilec.families.mma_sync import CONVERT_PTX, mma_b_coord
from tilec.ir.types import BF16, F16, I8
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline

from .test_ptxas import assert_assembles

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
TEXT = (SAMPLES / "w8a16.py").read_text(encoding="utf-8")


def sample(activations: str = "f16"):
    text = TEXT.replace("from tilec import f16,", "from tilec import bf16, f16,")
    for old in ("A: f16[", "C: f16[", ".to(f16)"):
        text = text.replace(old, old.replace("f16", activations))
    return load_file(SAMPLES / "w8a16.py", text=text)["w8a16"]


def operands(rng, M, N, K, activations):
    a = rng.standard_normal((M, K)).astype(np.float32)
    if activations == "bf16":  # bf16 values held in f32 words' upper halves, as the tests do
        a = (a.view(np.uint32) & 0xFFFF0000).view(np.float32)
        arg = (a.view(np.uint32) >> 16).astype(np.uint16)
    else:
        a = a.astype(np.float16).astype(np.float32)
        arg = a.astype(np.float16)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    w[0, :] = -128  # the extremes
    w[-1, :] = 127
    scale = (rng.random(N) * 0.02 + 0.001).astype(np.float32)
    return arg, a.astype(np.float64), w, scale


# ------------------------------------------------------------------------- fragments

def test_each_register_is_two_adjacent_k_bytes_of_the_ptx_isa_b_fragment() -> None:
    """PTX ISA, m16n8k16 .f16/.bf16 B: element i of lane l is at row k = 2 (l % 4) + (i % 2)
    (+ 8 for i >= 2), col n = l / 4; register i // 2 holds elements 2 r, 2 r + 1. With W
    stored [N, K] those are bytes (n, k), (n, k + 1): one u16."""
    for lane in range(32):
        for reg in range(2):
            k, n = pair_coord(lane, reg)
            assert (k, n) == (2 * (lane % 4) + 8 * reg, lane // 4)
            assert [mma_b_coord(lane, reg, h) for h in (0, 1)] == [(k, n), (k + 1, n)]


# ------------------------------------------------------------- the conversion, bit for bit

def _f16(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint16).view(np.float16)[0])


def _f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def _f32_bits(value: float) -> int:
    return struct.unpack("<I", struct.pack("<f", value))[0]


def _evaluate(lines, r: int) -> int:
    """The few PTX instructions of CONVERT_PTX's i8 entries, on one register, by the PTX
    ISA's definitions (prmt's default mode: each selector nibble picks a byte of {b, a})."""
    regs = {"r": r}

    def val(x: str) -> int:
        x = x.strip()
        if x.startswith("0f"):
            return int(x[2:], 16)
        return int(x, 0) if x[0].isdigit() else regs[x.strip("{}")]
    for line in lines:
        name, rest = line.rstrip(";").split(" ", 1)
        d, *args = [a.strip() for a in rest.split(",")]
        d = d.strip("{}")
        v = [val(a) for a in args]
        if name == "xor.b32":
            out = v[0] ^ v[1]
        elif name == "mov.b32":
            out = v[0]
        elif name == "prmt.b32":
            pool = (v[0] | v[1] << 32).to_bytes(8, "little")
            out = int.from_bytes(bytes(pool[(v[2] >> 4 * i) & 7] for i in range(4)), "little")
        elif name == "sub.rn.f16x2":
            out = 0
            for half in (0, 1):
                x, y = _f16(v[0] >> 16 * half & 0xFFFF), _f16(v[1] >> 16 * half & 0xFFFF)
                bits = int(np.array([x - y], dtype=np.float16).view(np.uint16)[0])
                out |= bits << 16 * half
        elif name == "sub.rn.f32":
            out = _f32_bits(np.float32(_f32(v[0]) - _f32(v[1])))
        elif name == "cvt.rn.bf16x2.f32":  # d = {a (upper), b (lower)}; exact here
            hi, lo = _f32_bits(_f32(v[0])), _f32_bits(_f32(v[1]))
            assert hi & 0xFFFF == 0 and lo & 0xFFFF == 0, "not exact in bf16"
            out = (hi & 0xFFFF0000) | (lo >> 16)
        else:
            raise AssertionError(f"no model of {name}")
        regs[d] = out & 0xFFFFFFFF
    return regs["d"]


@pytest.mark.parametrize("product", [F16, BF16])
def test_the_conversion_ptx_is_exact_for_every_byte_pair(product) -> None:
    lines = [re.sub(r"\{(\w+)\}", r"\1", line) for line in CONVERT_PTX[I8, product]]
    for lo in range(256):
        for hi in range(0, 256, 3 if lo % 7 else 1):
            d = _evaluate(lines, hi << 8 | lo)
            for half, byte in ((0, lo), (1, hi)):
                bits = d >> 16 * half & 0xFFFF
                got = _f16(bits) if product == F16 else _f32(bits << 16)
                assert got == byte - 256 * (byte >= 128), (product, lo, hi, hex(d))


# ------------------------------------------------------------------ the lowered kernel

@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("arch, consts, opts", [
    ("sm_80", dict(BM=64, BN=64, BK=32), {}),
    ("sm_86", dict(BM=32, BN=64, BK=64), dict(stages=2, warps=(1, 2))),
    # sm_90a's own choice is the swapped register form (tests/test_swap_product.py).
    ("sm_90a", {}, dict(disable=("swap_product",))),
    ("sm_80", dict(BM=64, BN=32, BK=32), dict(swizzle="off", stages=1)),
    ("sm_90", dict(BM=32, BN=64, BK=128), dict(stages=4, warps=(1, 2))),  # bench's skinny
    ("sm_90a", dict(BM=32, BN=64, BK=64), dict(stages=4, warps=(1, 2), split_k=2)),
])
@pytest.mark.parametrize("shape", [(70, 45, 100), (33, 50, 77)])  # odd K: a pair straddles it
def test_the_lowered_kernel_matches_float64(activations, arch, consts, opts, shape) -> None:
    kernel = run_pipeline(sample(activations).lower(**consts),
                          Options(arch=arch, **opts)).kernel
    plan = kernel.schedule.tiling
    assert plan.kind == "mma" and plan.dtype == activations
    assert [op.source for op in plan.operands] == ["", "i8"]
    names = [op.name for op in kernel.walk()]
    assert "frag.ldbytes" in names and "frag.cvt" in names
    buffers = [op.result.type.dtype for op in kernel.walk() if op.name == "smem.alloc"]
    assert buffers[1] == I8  # W's shared tile stays 8-bit
    rng = np.random.default_rng(5)
    M, N, K = shape
    a, a_exact, w, scale = operands(rng, M, N, K, activations)
    out_dtype = np.float16 if activations == "f16" else np.uint16
    c = np.zeros((M, N), dtype=out_dtype)
    run_kernel(kernel, {"A": a, "W": w, "scale": scale, "C": c}, ops=op_catalogue())
    got = (c.astype(np.float64) if activations == "f16"
           else (c.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    want = (a_exact @ w.T.astype(np.float64)) * scale
    ulp = 2.0 ** -10 if activations == "f16" else 2.0 ** -7
    np.testing.assert_allclose(got, want, rtol=ulp, atol=1e-6)
    # ... as the interpreter's tile program does (the sums round in another order: within an
    # output ulp, not bit for bit).
    c2 = np.zeros_like(c)
    run_kernel(sample(activations).lower(**consts), {"A": a, "W": w, "scale": scale, "C": c2})
    assert np.mean(c == c2) > 0.99


def test_the_ptx_loads_byte_pairs_and_converts_them(tmp_path) -> None:
    ptx = sample().ptx(arch="sm_80")
    assert "ld.shared.u16" in ptx and "prmt.b32" in ptx and "sub.rn.f16x2" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    ldmatrix = [line for line in ptx.splitlines() if "ldmatrix" in line]
    assert ldmatrix and all(".trans" not in line for line in ldmatrix)  # A only
    assert_assembles(lambda arch: sample("bf16").ptx(arch=arch), tmp_path)


def test_explain_says_where_the_weights_are_converted() -> None:
    from tilec.tools.explain import explain, render_explanation
    # The product as written (sm_90a's own choice swaps it onto wgmma's register form).
    text = render_explanation(explain(sample().compile(arch="sm_90a",
                                                       disable=("swap_product",))))
    assert ("converted         operand B: stored i8, each fragment converted to f16 in "
            "registers after its ld.shared.u16") in text, text
    assert ("not wgmma         the mma family multiplies: operand B is converted from i8 "
            "in registers") in text, text
    assert "16 x i8 = 16 B" in text or "x i8 =" in text, text
    assert re.search(r"B\s+ld\.shared\.u16\s+T,swizzle", text), text  # the conflict row
    assert re.search(r"ld\.shared\.u16\s+sB\[", text), text  # the schedule


# ------------------------------------------------------------------------------ errors

PROGRAM = '''from __future__ import annotations
from tilec import bf16, f16, f32, f8e4m3, i8, tile

@tile
def f({params}, C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += {product}
        C[m * BM : +BM, n * BN : +BN] = acc
'''
A_TILE, W_TILE = "A[m * BM : +BM, k : +BK]", "W.T[k : +BK, n * BN : +BN]"


@pytest.mark.parametrize("params, product, message", [
    ("A: i8[M, K], W: f16[N, K]", f"{A_TILE}.to(f16) @ {W_TILE}",
     "which only wgmma's register form does (sm_90a)"),
    ("A: f16[M, K], W: i8[K, N]", f"{A_TILE} @ W[k : +BK, n * BN : +BN].to(f16)",
     "k must be contiguous"),
    ("A: f32[M, K], W: i8[N, K]", f"{A_TILE} @ {W_TILE}.to(f16)", "f32"),
    ("A: f16[M, K], W: i8[N, K]", f"{A_TILE} @ {W_TILE}", "i8"),
    ("A: f16[M, K], W: i8[N, K]", f"{A_TILE} @ {W_TILE}.to(f32)", "f32"),
    ("A: f16[M, K], W: f8e4m3[N, K]", f"{A_TILE} @ {W_TILE}.to(f16)",  # tests/test_wfp8a16
     "which needs sm_89 or later; the target is sm_80"),
    ("A: bf16[M, K], W: i8[N, K]", f"{A_TILE} @ {W_TILE}.to(f16)", "bf16 @ f16"),
])
def test_bad_mixes_are_refused_with_a_caret(params, product, message) -> None:
    text = PROGRAM.format(params=params, product=product)
    with pytest.raises(TileError) as info:
        load_file(Path("mix.py"), text=text)["f"].ptx(arch="sm_80")
    shown = str(info.value)
    assert message in shown and "mix.py:9:" in shown and "^" in shown, shown



def test_both_operands_converted_an_f16_a_and_i8_weights_into_bf16() -> None:
    """A f16 -> bf16 (ldmatrix, cvt.rn) and W i8 -> bf16 (frag.ldbytes, prmt) in one block."""
    text = PROGRAM.format(params="A: f16[M, K], W: i8[N, K]",
                          product=f"{A_TILE}.to(bf16) @ {W_TILE}.to(bf16)")
    kernel = run_pipeline(load_file(Path("mix.py"), text=text)["f"].lower(),
                          Options(arch="sm_80")).kernel
    assert [op.source for op in kernel.schedule.tiling.operands] == ["f16", "i8"]
    rng = np.random.default_rng(1)
    M, N, K = 70, 45, 100
    a = rng.standard_normal((M, K)).astype(np.float16)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    c = np.full((M, N), np.nan, dtype=np.float32)
    run_kernel(kernel, {"A": a, "W": w, "C": c}, ops=op_catalogue())
    from tilec.cpu.interpreter import round_to_dtype
    a_used = round_to_dtype(BF16, a.astype(np.float32)).astype(np.float64)
    want = a_used @ w.T.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-3)
    assert not np.allclose(c, a.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-6, atol=0)


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_the_race_checker_sees_the_byte_loads(stages) -> None:
    """frag.ldbytes reads W's shared stages: the hazard checker traces each read (and the
    compiler's schedule passes it); a refill with no barrier after them is a race."""
    from tilec.analysis.hazards import HazardError, check_schedule, main_loop, simulate
    from tilec.ir.core import clone_kernel
    kernel = clone_kernel(sample().compile(stages=stages).kernel)
    check_schedule(kernel)
    reads = [e for e in simulate(kernel, 3).events if e.op.name == "frag.ldbytes"]
    assert reads and all(e.buffer_name == "sB" for e in reads)
    assert "frag.ldbytes of operand B (k0 = 0) reading sB stage 0" in reads[0].describe()
    body = main_loop(kernel).regions[0].ops
    for op in [op for op in body if op.name == "gpu.barrier"]:
        body.remove(op)
    with pytest.raises(HazardError):
        check_schedule(kernel)


def test_viz_refuses_the_byte_loaded_operand_naming_its_loads() -> None:
    """viz's ldmatrix bank maps would misdraw W's u16 reads: the family says so instead."""
    from tilec.tools import viz
    plan = sample().compile(arch="sm_80").kernel.schedule.tiling
    with pytest.raises(ValueError, match=r"kernel 'w8a16' uses int8 weights read two bytes a "
                                         r"register \(f16 tiles: ldmatrix of A, ld\.shared\.u16"):
        viz.require_mma(plan, "w8a16")
