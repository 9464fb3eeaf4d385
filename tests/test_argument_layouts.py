"""The bench's sample kernel compiles for any argument layout a caller may pass: random
sizes (dims of one index among them), row-major or column-major views, padded row pitches,
pointers off by 1 to 8 elements; each compiled as a launch compiles it
(TileFunction.compile_for_arguments: the layout's spec and the launch's packing) with the
sample's own tile, for sm_80 and sm_90a. Every draw compiles, but for an 8-bit B stored n
contiguous, refused at the product with the layout to use; an 8-bit B with a unit K stride
compiles, but where N has one index and both strides are 1 (read as n contiguous: a known
limit, as a row-major [1, N] is)."""
from __future__ import annotations

import random

import pytest

from tilec.benchmarking.cases import EXACT_OUTPUT
from tilec.benchmarking.contenders import sample_kernel
from tilec.errors import TileConfigError
from tilec.launch.binding import Bound
from tilec.runtime.arrays import ITEMSIZE, ArrayArg

DRAWS = 120
BASE = 0x7F00_0000_0000
SIZES = (1, 1, 2, 3, 7, 8, 16, 17, 64, 100, 129, 255, 1000, 3000)
VIEWS = ("row", "column", "padded rows", "padded columns")


def view(rng: random.Random, name: str, shape: tuple[int, int], dtype: str, index: int,
         views: tuple[str, ...]) -> tuple[str, ArrayArg]:
    rows, cols = shape
    kind = rng.choice(views)
    pad = rng.choice((1, 8, 64))
    strides = {"row": (cols, 1), "column": (1, rows), "padded rows": (cols + pad, 1),
               "padded columns": (1, rows + pad)}[kind]
    offset = rng.choice((0, 0, 1, 8)) * ITEMSIZE[dtype]
    return kind, ArrayArg(name, BASE + (index << 36) + offset, dtype, shape, strides, device=0)


@pytest.mark.parametrize("arch, seed, dtypes", [
    ("sm_80", 1, ("f16", "bf16", "f32", "i8")),
    ("sm_90a", 2, ("f16", "bf16", "f32", "i8", "f8e4m3")),
])
def test_the_sample_compiles_for_random_argument_layouts(arch, seed, dtypes):
    rng = random.Random(seed)
    functions: dict[str, object] = {}
    refused = 0
    for _ in range(DRAWS):
        dtype = rng.choice(dtypes)
        output = EXACT_OUTPUT.get(dtype, dtype)  # the bench's C: i8 into i32, fp8 into f16
        m, n, k = (rng.choice(SIZES) for _ in range(3))
        function = functions.setdefault(dtype, sample_kernel(dtype, output))
        eight_bit = ITEMSIZE[dtype] == 1
        _, a = view(rng, "A", (m, k), dtype, 1, ("row", "padded rows") if eight_bit else VIEWS)
        b_view, b = view(rng, "B", (k, n), dtype, 2, VIEWS)
        _, c = view(rng, "C", (m, n), output, 3, ("row", "padded rows"))
        bound = Bound({"A": a, "B": b, "C": c}, {}, {"M": m, "N": n, "K": k})
        what = f"{dtype} {m}x{n}x{k}, B {b_view} {b.strides} at +{b.ptr - BASE - (2 << 36)}"
        # Refused where B's K dim has no unit stride (read n contiguous: so at one K index
        # too, a row-major [1, N]) and where N has one index and both strides are 1 (the
        # tie goes to the dim of one index, N). Sizes do not change tensor_spec's answer
        # otherwise.
        mn_contiguous_b = b.strides[0] != 1 or (n == 1 and b.strides == (1, 1))
        try:
            function.compile_for_arguments(function.lower(), bound, {"arch": arch})
        except TileConfigError as error:
            assert eight_bit and mn_contiguous_b, f"{what}: {error}"
            assert "is stored [K, N], mn contiguous" in str(error) and "B.T[k" in str(error)
            refused += 1
        else:
            assert not (eight_bit and mn_contiguous_b), f"{what}: compiled an n-contiguous B"
    assert refused < DRAWS // 2  # most draws are readable layouts
