"""The erfc approximation behind ``gelu`` (the erf form), the one definition the PTX emitter
(backend/compute.py) and the CPU model (tilec/cpu/interpreter.py) both evaluate.

PTX has no erf instruction. This is Numerical Recipes' ``erfcc`` (Press, Teukolsky, Vetterling,
Flannery, *Numerical Recipes in C*, 2nd ed., section 6.2): a Chebyshev fit

    erfc(z) = t exp(-z^2 + P(t)),  t = 1 / (1 + z / 2),  z >= 0,

with P of degree 9 and a *fractional* error below 1.2e-7 for every z >= 0 (in exact
arithmetic). A relative bound everywhere is what gelu needs: for x << 0,
gelu(x) = 0.5 x erfc(-x / sqrt 2) is tiny, and an absolute erf bound (Abramowitz and Stegun
7.1.26's 1.5e-7) would say nothing about it. Evaluated in f32 the exponent's rounding adds
about |z^2| 2^-23 relative error (tests/test_epilogue_math.py measures the whole).

It imports nothing: compiling reads the coefficients without loading numpy.
"""
from __future__ import annotations

# P(t) = ERFC_P[0] + ERFC_P[1] t + ... + ERFC_P[9] t^9.
ERFC_P = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
          -1.13520398, 1.48851587, -0.82215223, 0.17087277)
# The stated fractional error of t exp(-z^2 + P(t)) against erfc(z), z >= 0.
ERFC_MAX_RELATIVE_ERROR = 1.2e-7
