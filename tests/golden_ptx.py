"""The golden-PTX matrix: every sample for sm_80, sm_86 and sm_90 under a spread of options
(tiles, warps, stages 1-4, swizzle on/off, split-K, tf32, packing, annotations on/off), and
the pack kernel. ``tests/golden/ptx.json.xz`` holds the PTX each case gave when it was
recorded; ``test_golden_ptx.py`` checks that the compiler still writes it byte for byte.

A change that must alter PTX re-records it (and says which kernels changed and why in its
commit)::

    python -m tests.golden_ptx --record
"""
from __future__ import annotations

import argparse
import json
import lzma
from pathlib import Path
from typing import Any, Iterator

from tests.test_ptxas import ALL, DIVISIBLE, RAGGED, Case, case, load_sample

GOLDEN = Path(__file__).resolve().parent / "golden" / "ptx.json.xz"
ARCHS = ("sm_80", "sm_86", "sm_90")
SAMPLE_DTYPES = {"matmul": ("f16", "bf16", "f32"), "matmul_bt": ("f16", "bf16", "f32"),
                 "gemm_epilogue": ("f16", "bf16", "f32"), "sgemm": ("f32",)}


def matrix_cases() -> Iterator[Case]:
    """Each sample and dtype on every arch: defaults, stages 1 to 4, swizzle off, annotated,
    ragged and divisible sizes, other tiles and warps, split-K, and tf32 for f32."""
    for sample, dtypes in SAMPLE_DTYPES.items():
        for dtype in dtypes:
            for arch in ARCHS:
                yield case(sample, dtype, arch)
                for stages in (1, 2, 4):
                    yield case(sample, dtype, arch, stages=stages)
                yield case(sample, dtype, arch, swizzle="off")
                yield case(sample, dtype, arch, annotate=True)
                yield case(sample, dtype, arch, line_info=False)
                yield case(sample, dtype, arch, RAGGED)
                yield case(sample, dtype, arch, DIVISIBLE, BM=64, BN=128, BK=32, warps=(2, 2))
                yield case(sample, dtype, arch, RAGGED, split_k=3)
                if dtype == "f32":
                    yield case(sample, dtype, arch, f32_math="tf32")
                    yield case(sample, dtype, arch, RAGGED, f32_math="tf32", stages=2)


def packed_cases() -> Iterator[Case]:
    """Kernels compiled for what a launch packs: odd K (misaligned rows), K padded."""
    from tilec.launch.packing import row_major_launch
    for sample, dtype in (("matmul", "f16"), ("matmul_bt", "bf16"), ("gemm_epilogue", "f16"),
                          ("sgemm", "f32")):
        kernel = load_sample(sample, dtype).lower()
        for sizes in ({"M": 4095, "N": 4097, "K": 4093}, {"M": 200, "N": 136, "K": 71}):
            _, spec = row_major_launch(kernel, sizes, "always")
            for arch in ARCHS:
                yield case(sample, dtype, arch, spec=spec)


def cases() -> dict[str, Case]:
    everything = list(ALL) + list(matrix_cases()) + list(packed_cases())
    return {c.id: c for c in everything}


def pack_kernels() -> dict[str, str]:
    from tilec.backend.pack import pack_ptx
    return {f"pack-{size}-{arch}": pack_ptx(size, arch) for size in (1, 2, 4) for arch in ARCHS}


SAMPLES = str(Path(__file__).resolve().parent.parent / "samples")


def render(c: Case) -> str:
    """The case's PTX, or its compile error, with the samples' folder written as
    ``<samples>`` so that the text does not depend on where the checkout is."""
    try:
        text = c.ptx()
    except Exception as err:  # noqa: BLE001 - a refused configuration is golden too
        text = f"error: {type(err).__name__}: {err}"
    return text.replace(SAMPLES, "<samples>")


def render_all() -> dict[str, str]:
    out = {name: render(c) for name, c in cases().items()}
    out.update(pack_kernels())
    return out


def load() -> dict[str, str]:
    with lzma.open(GOLDEN, "rt", encoding="utf-8") as f:
        return json.load(f)


def record() -> int:
    ptx = render_all()
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(GOLDEN, "wt", encoding="utf-8", preset=9) as f:
        json.dump(ptx, f, indent=0, sort_keys=True)
    return len(ptx)


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--record", action="store_true", help="rewrite the golden file")
    args = parser.parse_args(argv)
    if args.record:
        print(f"recorded {record()} kernels in {GOLDEN}")
    else:
        golden = load()
        now = render_all()
        changed = sorted(k for k in golden if now.get(k) != golden[k])
        print(f"{len(golden)} golden kernels, {len(changed)} changed: {changed[:20]}")


if __name__ == "__main__":
    main()
