"""Weight-only quantization with fp8 weights (issue 13): f8e4m3 / f8e5m2 weights W[N, K]
converted to f16/bf16 in registers, ``acc += A @ W.T[...].to(f16)`` (samples/wfp8a16.py).

The same byte-operand path as i8 weights (tests/test_w8a16.py: frag.ldbytes, one
ld.shared.u16 a B register), converted by cvt.rn.f16x2.e4m3x2 / .e5m2x2 (sm_89+), and for
bf16 through f32: the conversion PTX evaluated over every byte pair; the lowered kernel run
by the CPU executor at ragged sizes against float64 of the decoded weights; the targets
without the conversion and the other misuses refused with a caret; explain; ptxas (also in
tests/test_ptxas.py). tests/gpu/test_w8a16_gpu.py runs the sample on a GPU.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tilec.cpu.interpreter import run_kernel
from tilec.errors import TileError
from tilec.families.catalogue import op_catalogue
from tilec.families.mma_sync import CONVERT_PTX
from tilec.ir.types import BF16, F16, F8E4M3, F8E5M2
from tilec.kernel import load_file
from tilec.options import Options
from tilec.pipeline import run_pipeline
from tilec.target import fp8

from .test_ptxas import assert_assembles

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
TEXT = (SAMPLES / "wfp8a16.py").read_text(encoding="utf-8")
FORMATS = {"f8e4m3": F8E4M3, "f8e5m2": F8E5M2}


def sample(weights: str = "f8e4m3", activations: str = "f16"):
    text = TEXT.replace("from tilec import f8e4m3,", "from tilec import bf16, f8e4m3, f8e5m2,")
    text = text.replace("W: f8e4m3[", f"W: {weights}[")
    for old in ("A: f16[", "C: f16[", ".to(f16)"):
        text = text.replace(old, old.replace("f16", activations))
    return load_file(SAMPLES / "wfp8a16.py", text=text)["wfp8a16"]


def operands(rng, M, N, K, weights, activations):
    """A (as passed, and its exact values), W's bits (finite values, the extremes in the
    first and last rows) and their exact values, and a per-channel scale that keeps C
    finite in f16."""
    a = rng.standard_normal((M, K)).astype(np.float32)
    if activations == "bf16":
        a = (a.view(np.uint32) & 0xFFFF0000).view(np.float32)
        arg = (a.view(np.uint32) >> 16).astype(np.uint16)
    else:
        a = a.astype(np.float16).astype(np.float32)
        arg = a.astype(np.float16)
    table = fp8.decode_table(weights)
    finite = np.flatnonzero(np.isfinite(table)).astype(np.uint8)
    w = rng.choice(finite, (N, K))
    w[0, :] = fp8.encode(np.array([fp8.largest(weights)]), weights)[0]
    w[0, 1::2] |= 0x80  # -largest
    w[-1, :] = rng.choice([0x00, 0x80, 0x01, 0x81, 0x02], K)  # zeros and subnormals
    w_exact = fp8.decode(w, weights).astype(np.float64)
    rms = np.sqrt(np.mean(w_exact ** 2, axis=1)) + 2.0 ** -20
    scale = ((rng.random(N) + 0.5) / (np.sqrt(K) * rms)).astype(np.float32)  # C about 1
    return arg, a.astype(np.float64), w, w_exact, scale


# ------------------------------------------------------------- the conversion, bit for bit

def _f16_bits(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float16).view(np.uint16).astype(np.uint32)


def _evaluate(lines: list[str], r: int, weights: str) -> int:
    """CONVERT_PTX's fp8 entries on one register, by the PTX ISA's definitions: mov.b32
    {lo, hi} splits the register; cvt.rn.f16x2.e4m3x2 d, a converts a's low byte into d's
    low half, its high byte into the high half (exact, modelled by the format's table)."""
    regs: dict[str, int] = {"r": r}
    table = fp8.decode_table(weights)
    for line in lines:
        name, rest = line.rstrip(";").split(" ", 1)
        if name == "mov.b32":
            (lo, hi), source = re.findall(r"\w+", rest.split("}")[0]), rest.split(",")[-1]
            value = regs[source.strip()]
            regs[lo], regs[hi] = value & 0xFFFF, value >> 16
            continue
        d, *args = [a.strip() for a in rest.split(",")]
        v = [regs[a] for a in args]
        if name in ("cvt.rn.f16x2.e4m3x2", "cvt.rn.f16x2.e5m2x2"):
            assert name.endswith(weights[2:] + "x2"), name
            low, high = _f16_bits([table[v[0] & 0xFF], table[v[0] >> 8 & 0xFF]])
            out = int(low) | int(high) << 16
        elif name == "cvt.f32.f16":
            out = int(np.array([v[0]], dtype=np.uint16).view(np.float16).astype(np.float32)
                      .view(np.uint32)[0])
        elif name == "cvt.rn.bf16x2.f32":  # d = {a (upper), b (lower)}; exact here
            assert v[0] & 0xFFFF == 0 and v[1] & 0xFFFF == 0 or any(
                np.isnan(np.array([x], dtype=np.uint32).view(np.float32)[0]) for x in v), \
                "not exact in bf16"
            out = (v[0] & 0xFFFF0000) | (v[1] >> 16)
        else:
            raise AssertionError(f"no model of {name}")
        regs[d] = out & 0xFFFFFFFF
    return regs["d"]


@pytest.mark.parametrize("weights", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("product", [F16, BF16])
def test_the_conversion_ptx_is_exact_for_every_byte_pair(weights, product) -> None:
    lines = [re.sub(r"\{(\w+)\}", r"\1", line).replace("{{", "{").replace("}}", "}")
             for line in CONVERT_PTX[FORMATS[weights], product]]
    assert any(line.startswith(f"cvt.rn.f16x2.{weights[2:]}x2") for line in lines)
    table = fp8.decode_table(weights)
    for lo in range(256):
        for hi in range(0, 256, 3 if lo % 7 else 1):
            d = _evaluate(lines, hi << 8 | lo, weights)
            for half, byte in ((0, lo), (1, hi)):
                bits = d >> 16 * half & 0xFFFF
                got = (np.array([bits], dtype=np.uint16).view(np.float16)[0] if product == F16
                       else np.array([bits << 16], dtype=np.uint32).view(np.float32)[0])
                want = table[byte]
                assert got == want or (np.isnan(got) and np.isnan(want)), \
                    (weights, product, lo, hi, hex(d))


# ------------------------------------------------------------------ the lowered kernel

@pytest.mark.parametrize("weights", ["f8e4m3", "f8e5m2"])
@pytest.mark.parametrize("activations", ["f16", "bf16"])
@pytest.mark.parametrize("arch, consts, opts", [
    ("sm_90", dict(BM=64, BN=64, BK=32), {}),
    # sm_90a's own choice swaps the product onto wgmma's register form (test_wgmma_rs.py).
    ("sm_90a", {}, dict(disable=("swap_product",))),
    ("sm_90", dict(BM=64, BN=32, BK=32), dict(swizzle="off", stages=1)),
    ("sm_90a", dict(BM=32, BN=64, BK=64), dict(stages=4, warps=(1, 2), split_k=2)),
])
@pytest.mark.parametrize("shape", [(70, 45, 100), (33, 50, 77)])  # odd K: a pair straddles it
def test_the_lowered_kernel_matches_float64(weights, activations, arch, consts, opts,
                                            shape) -> None:
    kernel = run_pipeline(sample(weights, activations).lower(**consts),
                          Options(arch=arch, **opts)).kernel
    plan = kernel.schedule.tiling
    assert plan.kind == "mma" and plan.dtype == activations
    assert [op.source for op in plan.operands] == ["", weights]
    names = [op.name for op in kernel.walk()]
    assert "frag.ldbytes" in names and "frag.cvt" in names
    buffers = [op.result.type.dtype for op in kernel.walk() if op.name == "smem.alloc"]
    assert buffers[1] == FORMATS[weights]  # W's shared tile stays 8-bit
    rng = np.random.default_rng(7)
    M, N, K = shape
    a, a_exact, w, w_exact, scale = operands(rng, M, N, K, weights, activations)
    out_dtype = np.float16 if activations == "f16" else np.uint16
    c = np.zeros((M, N), dtype=out_dtype)
    run_kernel(kernel, {"A": a, "W": w, "scale": scale, "C": c}, ops=op_catalogue())
    got = (c.astype(np.float64) if activations == "f16"
           else (c.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    want = (a_exact @ w_exact.T) * scale
    assert np.all(np.isfinite(want)) and np.abs(want[:, 0]).max() > 0.5
    ulp = 2.0 ** -10 if activations == "f16" else 2.0 ** -7
    np.testing.assert_allclose(got, want, rtol=ulp, atol=1e-6)
    # ... as the interpreter's tile program does (the sums round in another order).
    c2 = np.zeros_like(c)
    run_kernel(sample(weights, activations).lower(**consts),
               {"A": a, "W": w, "scale": scale, "C": c2})
    assert np.mean(c == c2) > 0.99


@pytest.mark.parametrize("weights", ["f8e4m3", "f8e5m2"])
def test_the_ptx_loads_byte_pairs_and_converts_them_with_cvt(weights, tmp_path) -> None:
    ptx = sample(weights).ptx(arch="sm_90")
    pairs = len(re.findall(r"ld\.shared\.u16", ptx))
    cvts = len(re.findall(rf"cvt\.rn\.f16x2\.{weights[2:]}x2", ptx))
    # A 64x64 warp tile's B is 16 registers a k16 step, 4 steps a BK of 64: one cvt per
    # register; the loop's first step's loads are also issued before it (carried).
    assert cvts == 4 * 16 and pairs == cvts + 16, (pairs, cvts)
    assert "prmt.b32" not in ptx and "sub.rn.f16x2" not in ptx  # not the i8 trick
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    ldmatrix = [line for line in ptx.splitlines() if "ldmatrix" in line]
    assert ldmatrix and all(".trans" not in line for line in ldmatrix)  # A only
    bf16 = sample(weights, "bf16").ptx(arch="sm_90")
    assert "cvt.rn.bf16x2.f32" in bf16 and "mma.sync.aligned.m16n8k16.row.col.f32.bf16" in bf16
    assert_assembles(lambda arch: sample(weights, "bf16").ptx(arch=arch), tmp_path,
                     archs=("sm_90", "sm_90a"))


def test_explain_says_how_the_weights_are_converted() -> None:
    from tilec.tools.explain import explain, render_explanation
    text = render_explanation(explain(sample("f8e5m2").compile(arch="sm_90a",
                                                              disable=("swap_product",))))
    assert ("converted         operand B: stored f8e5m2, each fragment converted to f16 in "
            "registers after its ld.shared.u16 (frag.ldbytes: a register's two bytes; "
            "frag.cvt: cvt.rn.f16x2.e5m2x2") in text, text
    assert re.search(r"B\s+ld\.shared\.u16\s+T,swizzle", text), text


def test_viz_refuses_the_byte_loaded_operand_naming_its_loads() -> None:
    from tilec.tools import viz
    plan = sample("f8e5m2").compile(arch="sm_90").kernel.schedule.tiling
    with pytest.raises(ValueError, match=r"kernel 'wfp8a16' uses f8e5m2 weights read two bytes "
                                         r"a register \(f16 tiles: ldmatrix of A, "
                                         r"ld\.shared\.u16"):
        viz.require_mma(plan, "wfp8a16")


# ------------------------------------------------------------------------------ errors

PROGRAM = '''from __future__ import annotations
from tilec import bf16, f16, f32, f8e4m3, f8e5m2, tile

@tile
def f({params}, C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += {product}
        C[m * BM : +BM, n * BN : +BN] = {result}
'''
A_TILE, W_TILE = "A[m * BM : +BM, k : +BK]", "W.T[k : +BK, n * BN : +BN]"
GOOD = dict(params="A: f16[M, K], W: f8e4m3[N, K]", product=f"{A_TILE} @ {W_TILE}.to(f16)",
            result="acc")


@pytest.mark.parametrize("arch", ["sm_80", "sm_86"])
@pytest.mark.parametrize("weights", ["f8e4m3", "f8e5m2"])
def test_targets_without_the_conversion_are_refused_at_the_to(arch, weights) -> None:
    text = PROGRAM.format(**{**GOOD, "params": f"A: f16[M, K], W: {weights}[N, K]"})
    with pytest.raises(TileError) as info:
        load_file(Path("mix.py"), text=text)["f"].ptx(arch=arch)
    shown = str(info.value)
    assert (f"operand B of `@` is stored in {weights} and converted to f16 in registers "
            f"(cvt.rn.f16x2.{weights[2:]}x2), which needs sm_89 or later; the target is "
            f"{arch}") in shown, shown
    source_line, caret = shown.splitlines()[1:3]
    assert "mix.py:9:" in shown and source_line[caret.index("^"):].startswith("to(f16)")
    assert "compile for sm_90 or sm_90a" in shown
    load_file(Path("mix.py"), text=text)["f"].ptx(arch="sm_90")  # accepted there


@pytest.mark.parametrize("edit, line, message", [
    (dict(params="A: f8e4m3[M, K], W: f16[N, K]", product=f"{A_TILE}.to(f16) @ {W_TILE}"), 9,
     "which only wgmma's register form does (sm_90a)"),
    (dict(params="A: f16[M, K], W: f8e4m3[K, N]",
          product=f"{A_TILE} @ W[k : +BK, n * BN : +BN].to(f16)"), 9, "k must be contiguous"),
    (dict(product=f"{A_TILE} @ {W_TILE}.to(f32)"), 9, "dot operands differ in dtype"),
    (dict(params="A: f16[M, K], W: f8e4m3[N, K]",
          product=f"{A_TILE} @ {W_TILE}.to(bf16)"), 9, "dot operands differ in dtype"),
])
def test_misuses_are_refused_with_a_caret(edit, line, message) -> None:
    text = PROGRAM.format(**{**GOOD, **edit})
    with pytest.raises(TileError) as info:
        load_file(Path("mix.py"), text=text)["f"].ptx(arch="sm_90")
    shown = str(info.value)
    assert message in shown and f"mix.py:{line}:" in shown and "^" in shown, shown
