"""Division by a constant (backend/divide.py): the emitted shift / multiply-high sequence,
modelled on 32-bit registers, equals the IR's floordiv and mod for every int32 dividend; and
the loops that divide by constants (the warp-specialized ring's stage and phase) emit no
div/rem, which ptxas lowers to a reciprocal sequence."""
from __future__ import annotations

import random
import re

import pytest

from tilec.backend.divide import divider, model
from tests.test_ptxas import load_sample

INT32 = (-(1 << 31), (1 << 31) - 1)
EDGES = [0, 1, 2, 3, 63, 64, 65, 127, 128, 1000, 4095, 4096, (1 << 31) - 1, (1 << 31) - 2,
         (1 << 30), (1 << 30) + 1]
DIVISORS = [1, 2, 3, 5, 6, 7, 12, 64, 96, 100, 127, 128, 192, 255, 641, 1000, 4093, 65537,
            (1 << 30) + 3, (1 << 31) - 1]


def dividends(d: int) -> list[int]:
    rng = random.Random(d)
    near = [m * d + r for m in (0, 1, 2, 1000, (1 << 31) // d - 1) for r in (-1, 0, 1)]
    values = EDGES + near + [rng.randint(*INT32) for _ in range(2000)]
    values += [-v - 1 for v in values] + [-v for v in values]
    return [v for v in values if INT32[0] <= v <= INT32[1]]


@pytest.mark.parametrize("d", DIVISORS)
def test_floor_division_and_remainder_match_python_for_every_sign(d):
    for x in dividends(d):
        assert model(x, d) == (x // d, x % d), (x, d)


@pytest.mark.parametrize("d", DIVISORS)
def test_nonnegative_form_matches_for_nonnegative_dividends(d):
    for x in dividends(d):
        if x >= 0:
            assert model(x, d, nonnegative=True) == (x // d, x % d), (x, d)


def test_every_divisor_up_to_4096_against_the_hardest_dividends():
    for d in range(1, 4097):
        for x in (INT32[1], INT32[1] - d, INT32[0], INT32[0] + d, d - 1, -d + 1):
            assert model(x, d) == (x // d, x % d), (x, d)


def test_magic_fits_a_register_and_powers_of_two_shift():
    for d in range(1, 1 << 13):
        plan = divider(d)
        if d & (d - 1) == 0:
            assert plan.magic is None and 1 << plan.shift == d
        else:
            assert 0 < plan.magic < 1 << 32


@pytest.mark.parametrize("d", [0, -3])
def test_nonpositive_divisor_is_refused(d):
    with pytest.raises(ValueError, match="positive"):
        divider(d)


def test_warp_specialized_loops_divide_without_div_or_rem():
    kernel = load_sample("matmul", "f16")
    ptx = kernel.ptx(arch="sm_90a", BM=128, BN=256, BK=64, stages=3)
    loops = re.findall(r"\$L_loop_\d+:(.*?)bra\.uni \$L_loop", ptx, re.S)
    assert len(loops) == 2  # the producer's and the consumers' K loops
    for body in loops:
        assert not re.search(r"\b(div|rem)\.[su]32\b", body)
        # The ring's stage and phase are carried, a wrapping increment and a select: no
        # multiply-high per K step either.
        assert "mul.hi.u32" not in body and "selp.b32" in body
    # Where the loops start (ws.ring_base % 3 and its phase (ring_base / 3) % 2, once per
    # tile): a multiply-high.
    assert "mul.hi.u32" in ptx.split("$L_loop")[0]
