"""The fuzzer's programs (:mod:`tilec.tools.fuzz` runs them): random matmul kernels built from
parts, textual mutations of samples and kernels, and the generator's own float64 evaluation
of a kernel's epilogue tree, independent of tilec's reference, that the CPU checks compare
the interpreter with.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Any, Optional, Union

import numpy as np

ARCHS = ("sm_80", "sm_86", "sm_90", "sm_90a")
# The sm_90a schedule knobs, tried on the warp-specialized path only (other targets take
# none of them); a program gets one of these beside its other options.
HOPPER_SCHEDULES = ({}, {}, {"persistent": True}, {"cluster": 2},
                    {"persistent": True, "cluster": 2}, {"blocks_per_sm": 2}, {"cluster": 4},
                    {"persistent": True, "cluster": 4}, {"cluster": 2, "cluster_n": 2},
                    {"persistent": True, "cluster": 2, "cluster_n": 2}, {"cluster_n": 2},
                    {"cluster": 4, "cluster_n": 2})
# Those a split-K program takes: its slices are blocks of their own, one tile each (a
# cluster's blocks on one slice).
SPLIT_SCHEDULES = ({}, {"blocks_per_sm": 2}, {"cluster": 2}, {"cluster": 4},
                   {"cluster": 2, "cluster_n": 2})
PINGPONG = {"persistent": True, "consumers": "pingpong"}


# ------------------------------------------------------------------------------ programs

@dataclasses.dataclass
class Program:
    """One generated program: its text, how to compile it, and (for generated kernels) what
    the generator knows about it: the epilogue tree and the dtypes, for :func:`evaluate`."""

    index: int
    origin: str  # "matmul" or "mutation"
    text: str
    suffix: str = ".py"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    hopper_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # sm_90a only
    features: frozenset[str] = frozenset()
    # Generated kernels only.
    dtypes: dict[str, str] = dataclasses.field(default_factory=dict)
    layouts: dict[str, bool] = dataclasses.field(default_factory=dict)  # transposed?
    tiles: tuple[int, int, int] = (0, 0, 0)
    epilogue: Optional[tuple] = None
    reads_c: bool = False
    check_ptxas: bool = False
    check_cpu: bool = False
    # The targets it is compiled for (the first without ptxas); fp8 products need sm_90.
    archs: tuple[str, ...] = ARCHS
    batched: bool = False  # rank-3 A, B and C, one grid axis over the batch

    @property
    def filename(self) -> str:
        return f"fuzz_{self.index:06d}{self.suffix}"


# Epilogue trees: ("acc",), ("c",), ("bias",), ("scale",) (an [M, 1] f32 column),
# ("scalar", name), ("lit", value), ("bin", op, left, right), ("call", "min" | "max", left,
# right), ("relu", x), ("neg", x), ("to", dtype, x), ("math", name, x) (exp, gelu, ...),
# ("where", cond, a, b) with cond ("cmp", op, x, y) | ("and", c, c) | ("or", c, c) |
# ("not", c). A node's dtype follows the DSL: numbers take the tile's dtype, an f32 scalar
# or tile with a 16-bit tile gives f32, equal dtypes stay.
Tree = tuple
LITERALS = (0.5, 2, 2.0, 1.5, -0.25, 3, 0.125, -1.0, 4.0)
# The math functions the generator applies, each as float64 numpy (its own, not tilec's), in
# forms that do not cancel where x << 0: 1 + erf(x / sqrt 2) and 1 + tanh(x / 2) are 0 in
# float64 there, where gelu and sigmoid are tiny negative / positive numbers that f32 still
# holds (gelu(-9.75) = -9e-22), and a where() deciding on their sign would disagree with
# every kernel (seed 56, program 4210).
MATH = {
    "exp": np.exp,
    "abs": np.abs,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * _erfc(-x / np.sqrt(2.0)),
    # 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u))
    "gelu_tanh": lambda x: x / (1.0 + np.exp(-2.0 * np.sqrt(2.0 / np.pi)
                                             * (x + 0.044715 * x ** 3))),
    "sqrt": lambda x: np.sqrt(x),  # generated only as sqrt(abs(x))
}
COMPARISONS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
               "==": np.equal, "!=": np.not_equal}
_erfc_scalar = np.frompyfunc(__import__("math").erfc, 1, 1)


def _erfc(x: Any) -> np.ndarray:
    return np.asarray(_erfc_scalar(np.asarray(x, dtype=np.float64)), dtype=np.float64)


def _promote(dtypes_: list[Optional[str]]) -> Optional[str]:
    """The dtype of an operation over values of these dtypes (None: a number)."""
    sides = {d for d in dtypes_ if d is not None}
    if sides == {"scalar"}:
        return "scalar"
    tiles = {d for d in sides if d != "scalar"}
    if "scalar" in sides or len(tiles) > 1:
        return "f32"  # the only mix that compiles (f16 with bf16 is refused)
    return tiles.pop() if tiles else None


def _dtype_of(tree: Tree, dtypes: dict[str, str]) -> Optional[str]:
    """The node's dtype; None for a number, "scalar" for an f32 scalar."""
    kind = tree[0]
    if kind == "acc":
        return dtypes.get("acc", "f32")
    if kind == "c":
        return dtypes["C"]
    if kind == "bias":
        return dtypes["bias"]
    if kind == "scale":
        return "f32"
    if kind == "scalar":
        return "scalar"
    if kind == "lit":
        return None
    if kind == "to":
        return tree[1]
    if kind in ("relu", "neg"):
        return _dtype_of(tree[1], dtypes)
    if kind == "math":
        return _dtype_of(tree[2], dtypes)
    if kind == "where":
        return _promote([_dtype_of(tree[2], dtypes), _dtype_of(tree[3], dtypes)])
    return _promote([_dtype_of(tree[2], dtypes), _dtype_of(tree[3], dtypes)])


def _render(tree: Tree, slices: dict[str, str]) -> str:
    kind = tree[0]
    if kind in ("acc", "c"):
        return kind
    if kind in ("bias", "scale"):
        return slices[kind]
    if kind == "scalar":
        return tree[1]
    if kind == "lit":
        return repr(tree[1])
    if kind == "to":
        return f"{_wrap(tree[2], slices)}.to({tree[1]})"
    if kind == "relu":
        return f"relu({_render(tree[1], slices)})"
    if kind == "neg":
        return f"-{_wrap(tree[1], slices)}"
    if kind == "math":
        return f"{tree[1]}({_render(tree[2], slices)})"
    if kind == "where":
        return (f"where({_render_cond(tree[1], slices)}, {_render(tree[2], slices)}, "
                f"{_render(tree[3], slices)})")
    if kind == "call":
        return f"{tree[1]}({_render(tree[2], slices)}, {_render(tree[3], slices)})"
    return f"{_wrap(tree[2], slices)} {tree[1]} {_wrap(tree[3], slices)}"


def _render_cond(cond: Tree, slices: dict[str, str]) -> str:
    if cond[0] == "cmp":
        return f"{_wrap(cond[2], slices)} {cond[1]} {_wrap(cond[3], slices)}"
    if cond[0] == "not":
        return f"not ({_render_cond(cond[1], slices)})"
    return f"({_render_cond(cond[1], slices)}) {cond[0]} ({_render_cond(cond[2], slices)})"


def _wrap(tree: Tree, slices: dict[str, str]) -> str:
    text = _render(tree, slices)
    return f"({text})" if tree[0] in ("bin", "neg") else text


def _condition(rng: random.Random, tree: Tree, scalars: list[str], depth: int = 0) -> Tree:
    """A where() condition over ``tree``: comparisons with numbers, scalars or C."""
    roll = rng.random()
    if depth < 2 and roll < 0.15:
        return ("not", _condition(rng, tree, scalars, depth + 1))
    if depth < 2 and roll < 0.35:
        return (rng.choice(("and", "or")), _condition(rng, tree, scalars, depth + 1),
                _condition(rng, tree, scalars, depth + 1))
    other = rng.choice((("lit", rng.choice((0, 0.5, -1.0, 2))), ("scalar", rng.choice(scalars)),
                        ("c",)))
    sides = (tree, other) if rng.random() < 0.7 else (other, tree)
    return ("cmp", rng.choice(tuple(COMPARISONS)), *sides)


def _grow(rng: random.Random, tree: Tree, has_bias: bool, scalars: list[str],
          has_scale: bool = False, rich: bool = False) -> Tree:
    """One epilogue step applied to ``tree``; ``rich`` adds where() and the math functions."""
    literal = ("lit", rng.choice(LITERALS))
    scalar = ("scalar", rng.choice(scalars))
    steps = [
        lambda: ("bin", "*", scalar, tree),
        lambda: ("bin", "*", tree, scalar),
        lambda: ("bin", "+", tree, ("bin", "*", scalar, ("c",))),
        lambda: ("bin", "-", tree, ("c",)),
        lambda: ("relu", tree),
        lambda: ("neg", tree),
        lambda: ("to", rng.choice(("f16", "bf16", "f32")), tree),
        lambda: ("call", rng.choice(("min", "max")), tree, literal),
        lambda: ("call", rng.choice(("min", "max")), literal, tree),
        lambda: ("bin", rng.choice("+-*"), tree, literal),
        lambda: ("bin", rng.choice("+-*"), literal, tree),
        lambda: ("bin", "/", tree, ("lit", rng.choice((2, 0.5, -4.0, 8)))),
        lambda: ("bin", "/", tree, scalar),
        lambda: ("bin", rng.choice("+-*"), tree, tree),
    ]
    if has_bias:
        steps.append(lambda: ("bin", "+", tree, ("bias",)))
    if has_scale:
        steps.append(lambda: ("bin", "*", tree, ("scale",)))
    if rich:
        name = rng.choice(tuple(name for name in MATH if name != "sqrt"))
        steps += [
            lambda: ("math", name, tree),
            lambda: ("math", "sqrt", ("math", "abs", tree)),
            lambda: ("where", _condition(rng, tree, scalars), tree,
                     rng.choice((("lit", 0), literal, ("bin", "*", tree, literal), ("c",)))),
            lambda: ("where", _condition(rng, tree, scalars), ("c",), tree),
        ]
    return rng.choice(steps)()


def _children(tree: Tree) -> list[Tree]:
    return [t for t in tree[1:] if isinstance(t, tuple)]


def _features_of(tree: Tree, dtypes: dict[str, str]) -> set[str]:
    found: set[str] = set()
    kind = tree[0]
    if kind in ("bin", "call", "cmp"):
        left, right = tree[2], tree[3]
        for number, other in ((left, right), (right, left)):
            if number[0] == "lit" and _dtype_of(other, dtypes) in ("f16", "bf16"):
                found.add("literal_with_16bit_tile")
    if kind in ("math", "where"):
        found.add(kind)
    for child in _children(tree):
        found |= _features_of(child, dtypes)
    if "c" in _leaves(tree):
        found.add("reads_c")
    return found


MAX_TREE_NODES = 24


def _size(tree: Tree) -> int:
    return 1 + sum(_size(child) for child in _children(tree))


def _leaves(tree: Tree) -> set[str]:
    if tree[0] in ("acc", "c", "bias", "scale", "scalar", "lit"):
        return {tree[0]}
    return set().union(*(_leaves(t) for t in _children(tree)))


def _wgmma_takes(tiles: tuple[int, int, int], options: dict[str, Any]) -> bool:
    """Whether sm_90a compiles the program on the warp-specialized wgmma path, by the
    family's own rule: only there do the schedule knobs (HOPPER_SCHEDULES) apply."""
    from tilec.families.wgmma import FAMILY as WGMMA
    from tilec.options import Options
    return WGMMA.declined(tiles, Options(arch="sm_90a", **options)) is None


# The operands a generated kernel multiplies: (A dtype, B dtype, B converted to, accumulator)
# by kind. "float": f16 / bf16 / f32 products; "int8": i8 @ i8 into i32 (exact); "fp8":
# e4m3 / e5m2 into f32 (sm_90 and sm_90a only); "w8": 16-bit activations times 8-bit weights
# converted to the activations' dtype in registers (fp8 weights: sm_90 and sm_90a only).
OPERAND_KINDS = ("float",) * 6 + ("int8", "int8", "fp8", "w8", "w8")
FP8 = ("f8e4m3", "f8e5m2")
HOPPER_ARCHS = ("sm_90", "sm_90a")


def _operands(rng: random.Random, kind: str) -> tuple[dict[str, str], dict[str, bool]]:
    """The dtypes (A, B, the B conversion, the accumulator) and the layouts (transposed?)."""
    if kind == "float":
        operand = rng.choice(("f16", "f16", "bf16", "f32"))
        return ({"A": operand, "B": operand, "acc": "f32"},
                {"A": rng.random() < 0.25, "B": rng.random() < 0.4})
    # 8-bit products read both operands k-contiguous: A [M, K] and B [N, K] (B.T); other
    # layouts now and then, which must be refused cleanly.
    layouts = {"A": rng.random() < 0.05, "B": rng.random() < 0.9}
    if kind == "int8":
        return {"A": "i8", "B": "i8", "acc": "i32"}, layouts
    if kind == "fp8":
        a = rng.choice(FP8)
        return {"A": a, "B": a if rng.random() < 0.95 else rng.choice(FP8), "acc": "f32"}, layouts
    activation = rng.choice(("f16", "f16", "bf16"))
    return ({"A": activation, "B": rng.choice(("i8", "i8") + FP8), "convert": activation,
             "acc": "f32"}, {"A": rng.random() < 0.1, "B": rng.random() < 0.9})


@dataclasses.dataclass
class _Draw:
    """What generate_matmul has drawn so far of one program: its operands, its block tile
    and the families and schedules the tile is meant for."""
    kind: str
    dtypes: dict[str, str]
    transposed: dict[str, bool]
    integer_out: bool
    bm: int = 0
    bn: int = 0
    bk: int = 0
    hopper_tile: bool = False
    strip_tile: bool = False
    swap_tile: bool = False
    batched: bool = False

    @property
    def compute(self) -> str:
        """The dtype the product takes."""
        return self.dtypes.get("convert", self.dtypes["A"])

    @property
    def eight_bit(self) -> bool:
        return self.kind != "float"


def _draw_operands(rng: random.Random) -> _Draw:
    """The operands' kind and dtypes, C's and the bias's."""
    kind = rng.choice(OPERAND_KINDS)
    dtypes, transposed = _operands(rng, kind)
    compute = dtypes.get("convert", dtypes["A"])
    integer_out = kind == "int8" and rng.random() < 0.5
    dtypes["C"] = "i32" if integer_out else rng.choice(("f32", "f16", "bf16"))
    dtypes["bias"] = "f32" if compute in ("f32", "i8") or compute in FP8 else rng.choice(
        ("f32", "f32", "f16"))
    return _Draw(kind, dtypes, transposed, integer_out)


def _draw_tile(rng: random.Random, draw: _Draw) -> None:
    """The block tile, and whether it is one for wgmma, a 256-row strip or the swapped
    product; then whether the program is batched."""
    draw.bm, draw.bn = rng.choice((16, 32, 64, 128)), rng.choice((16, 32, 64, 128))
    # A share of tiles wgmma takes (warpgroup rows, no warp grid), where the sm_90a
    # schedules (persistent, pingpong, cluster; split-K one tile a block) apply; 192 for the
    # bench's three-warpgroup squares (192x256 falls back to mma.sync); now and then a BN
    # whose N-major rows are 64- or 32-byte TMA spans (96, 160, 176, 224; 208: 192x176 is
    # the bench's, its B padded); and the bench's 256-row tiles in 128-row warpgroups (BN 144
    # to 192: C's slabs in turn a strip at a time, odd counts of them; and 256x64).
    draw.hopper_tile = rng.random() < 0.2
    draw.strip_tile = draw.hopper_tile and rng.random() < 0.15
    if draw.strip_tile:
        draw.bm, draw.bn = 256, rng.choice((64, 144, 160, 176, 192))
    elif draw.hopper_tile:
        draw.bm = rng.choice((64, 128, 192))
        draw.bn = rng.choice((64, 128, 192, 256) * 2 + (96, 160, 176, 208, 224))
    # The swapped product (swap_product="always") now and then on 16-bit wgmma tiles, whose
    # BM is then any multiple of 8 (wgmma's n): compiled for sm_90a alone, where only the
    # swap takes such a BM.
    draw.swap_tile = draw.hopper_tile and not draw.strip_tile and \
        draw.compute in ("f16", "bf16") and "convert" not in draw.dtypes and rng.random() < 0.25
    if draw.swap_tile:
        draw.bm, draw.bn = rng.choice((72, 88, 104, 136, 152, 200, 256)), rng.choice((64, 128))
    # 8-bit products take k in steps of 32 (BK=16 now and then, refused cleanly).
    draw.bk = rng.choice((8, 16, 32) if draw.compute == "f32" else (32, 64) * 4 + (16,)
                         if draw.eight_bit else (16, 32, 64))
    # Weights converted in registers on wgmma's tiles: BK 128 now and then, where sm_90a
    # swaps the product onto wgmma's register form (passes/swap_product.py).
    if draw.kind == "w8" and draw.hopper_tile and rng.random() < 0.5:
        draw.bk = 128
    elif (draw.strip_tile or draw.swap_tile) and not draw.eight_bit:
        draw.bk = 64  # wgmma's 16-bit blocks (a shallower one stays on mma.sync)
    draw.batched = rng.random() < 0.15


def _draw_names(rng: random.Random, index: int, features: set[str]) -> dict[str, str]:
    """The kernel's and the scalars' names: now and then an odd one."""
    names = {"kernel": f"kernel_{index}", "alpha": "alpha", "beta": "beta"}
    roll = rng.random()
    if roll < 0.02:
        names["kernel"] = rng.choice(("_", "_k"))
        features.add("underscore_kernel")
    elif roll < 0.04:
        names["kernel"] = "matmul_é"
        features.add("non_ascii_name")
    elif roll < 0.06:
        names["alpha"] = rng.choice(("A_ptr", "dim_M", "A_stride0", "C_ptr"))
        features.add("name_like_generated")
    return names


def _draw_epilogue(rng: random.Random, draw: _Draw, scalars: list[str], features: set[str]
                   ) -> tuple[Tree, bool, bool, bool]:
    """The epilogue's tree (C's dtype at its root), and whether it reads a bias (of [1, N]:
    a unit view) and a scale."""
    has_bias = not draw.integer_out and rng.random() < 0.5
    has_scale = not draw.integer_out and rng.random() < 0.15
    bias_row = has_bias and rng.random() < 0.25  # bias: [1, N], a unit view
    rich = rng.random() < 0.4
    tree: Tree = ("acc",)
    if not draw.integer_out:
        if draw.kind == "int8":
            tree = ("to", "f32", tree)
        for _ in range(rng.randint(0, 4)):
            # where() and `tree op tree` repeat the tree: unchecked, a few steps give an
            # epilogue whose PTX takes ptxas longer than the time limit.
            if _size(tree) > MAX_TREE_NODES:
                break
            tree = _grow(rng, tree, has_bias, scalars, has_scale, rich)
        if _dtype_of(tree, draw.dtypes) != draw.dtypes["C"]:
            tree = ("to", draw.dtypes["C"], tree)
    features |= _features_of(tree, draw.dtypes)
    # A tensor parameter the kernel never touches is an error: declare only those read.
    has_bias, has_scale = "bias" in _leaves(tree), "scale" in _leaves(tree)
    bias_row = bias_row and has_bias
    draw.dtypes["scale"] = "f32"
    if has_bias:
        features.add("bias")
    if has_scale or bias_row:
        features.add("unit_view")
    return tree, has_bias, has_scale, bias_row


def _draw_text(rng: random.Random, draw: _Draw, names: dict[str, str], tree: Tree,
               has_bias: bool, has_scale: bool, bias_row: bool, features: set[str]
               ) -> tuple[str, Tree, bool]:
    """The program's source; its tree with a compile-time branch's relu where one is taken,
    and whether it reads C."""
    dtypes, transposed, batched = draw.dtypes, draw.transposed, draw.batched
    b_dim = "Bt, " if batched else ""
    shape_a = "K, M" if transposed["A"] else "M, K"
    shape_b = "N, K" if transposed["B"] else "K, N"
    params = [f"A: {dtypes['A']}[{b_dim}{shape_a}]", f"B: {dtypes['B']}[{b_dim}{shape_b}]",
              f"C: {dtypes['C']}[{b_dim}M, N]"]
    if has_bias:
        params.append(f"bias: {dtypes['bias']}[{'1, N' if bias_row else 'N'}]")
    if has_scale:
        params.append("scale: f32[M, 1]")
    params += [f"{names['alpha']}: f32", f"{names['beta']}: f32",
               f"BM={draw.bm}", f"BN={draw.bn}", f"BK={draw.bk}"]
    activation = None
    if not draw.integer_out and rng.random() < 0.1:
        activation = rng.choice((0, 1))  # a compile-time `if ACT == 1:` adds a relu
        params.append(f"ACT={activation}")
        features.add("compile_time_if")
    batch = "b, " if batched else ""
    a_rows, b_cols = "m * BM : +BM", "n * BN : +BN"
    if batched:
        a_ref = (f"A[b, k : +BK, {a_rows}].T" if transposed["A"]
                 else f"A[b, {a_rows}, k : +BK]")
        b_ref = (f"B[b, {b_cols}, k : +BK].T" if transposed["B"]
                 else f"B[b, k : +BK, {b_cols}]")
    else:
        a_ref = f"{'A.T' if transposed['A'] else 'A'}[{a_rows}, k : +BK]"
        b_ref = f"{'B.T' if transposed['B'] else 'B'}[k : +BK, {b_cols}]"
    if "convert" in dtypes:
        b_ref += f".to({dtypes['convert']})"
    out = f"C[{batch}m * BM : +BM, n * BN : +BN]"
    grid_n = "cdiv(N, BN)"
    if rng.random() < 0.02 and draw.bm != draw.bn:
        grid_n = "cdiv(N, BM)"
        features.add("grid_mismatch")
    k_start = "0"
    if rng.random() < 0.02:
        k_start = rng.choice(("4294967296", "100000000000000000000", "65536 * 65536"))
        features.add("huge_integer")
    structure = rng.choice(("plain",) * 12 + ("acc_op_in_k_loop", "zeros_in_k_loop",
                                              "load_c_before_k_loop", "store_cast_in_k_loop"))
    reads_c = "c" in _leaves(tree)
    # Loading C early needs a read of C; a store in the loop must not be read back as C.
    if structure == "load_c_before_k_loop" and not reads_c:
        structure = "plain"
    if structure == "store_cast_in_k_loop" and reads_c:
        structure = "plain"
    if draw.kind == "int8" and structure in ("acc_op_in_k_loop", "zeros_in_k_loop"):
        structure = "plain"  # both are f32 arithmetic on the accumulator
    if structure != "plain":
        features.add(structure)
    grid_axes = f"Bt, cdiv(M, BM), {grid_n}" if batched else f"cdiv(M, BM), {grid_n}"
    lines = [f"    for {batch}m, n in grid({grid_axes}):",
             f"        acc = zeros([BM, BN], {dtypes['acc']})"]
    if structure == "load_c_before_k_loop":
        lines.append(f"        c = {out}")
    lines += [f"        for k in range({k_start}, K, BK):",
              f"            acc += {a_ref} @ {b_ref}"]
    # Each structural variant leaves the result unchanged, so evaluate() still holds.
    lines += {"acc_op_in_k_loop": ["            acc = acc * 1.0"],
              "zeros_in_k_loop": ["            acc = acc + zeros([BM, BN], f32)"],
              "store_cast_in_k_loop": [f"            {out} = acc.to({dtypes['C']})"],
              }.get(structure, [])
    if reads_c and structure != "load_c_before_k_loop":
        lines.append(f"        c = {out}")
    slices = {"bias": f"bias[{'0:1, ' if bias_row else ''}n * BN : +BN]",
              "scale": "scale[m * BM : +BM, 0:1]"}
    lines.append(f"        out = {_render(tree, slices)}")
    if activation is not None:
        lines += ["        if ACT == 1:", "            out = relu(out)"]
        if activation == 1:
            tree = ("relu", tree)
    lines.append(f"        {out} = out")
    used = sorted(({dtypes[k] for k in ("A", "B", "C", "acc", "bias")}
                   | {dtypes.get("convert", "f32"), "f32"}), key=lambda d: (len(d), d))
    text = ("from __future__ import annotations\n\n"
            f"from tilec import {', '.join(sorted(used) + ['tile'])}\n\n\n"
            f"@tile\ndef {names['kernel']}({', '.join(params)}):\n" + "\n".join(lines) + "\n")
    return text, tree, reads_c


def _draw_options(rng: random.Random, draw: _Draw, features: set[str]) -> dict[str, Any]:
    """The compile options every target takes."""
    options: dict[str, Any] = {"stages": rng.randint(1, 4)}
    if not draw.hopper_tile and rng.random() < 0.3:
        options["warps"] = rng.choice(((1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4),
                                       (4, 2), (2, 4)))
    options["swizzle"] = rng.choice(("auto", "off"))
    # A batched grid has no axis left for split-K's slices (asked for now and then).
    if rng.random() < (0.05 if draw.batched else 0.15 if draw.hopper_tile else 0.3):
        options["split_k"] = rng.choice((2, 3, 4))
    if draw.compute == "f32":
        options["f32_math"] = rng.choice(("ffma", "tf32"))
    if rng.random() < 0.2:
        options["misaligned_copy"] = rng.choice(("elements", "vectors", "words"))
        features.add(f"misaligned_copy_{options['misaligned_copy']}")
    if rng.random() < 0.2:
        options["misaligned_store"] = rng.choice(("elements", "pairs", "rows"))
        features.add(f"misaligned_store_{options['misaligned_store']}")
    if rng.random() < 0.1:
        options["backend"] = "llvm"
        features.add("llvm")
    return options


def _draw_hopper(rng: random.Random, draw: _Draw, options: dict[str, Any],
                 features: set[str]) -> dict[str, Any]:
    """The sm_90a schedule, where the tile is one wgmma takes."""
    bm, bn, bk = draw.bm, draw.bn, draw.bk
    hopper: dict[str, Any] = {}
    # TMA's span asked for now and then (32 bytes fits every row wgmma takes; 64 may not,
    # which is a located error): it also keeps 16-bit blocks of BK under 64 on wgmma.
    span = {"tma_swizzle": rng.choice((64, 32))} if rng.random() < 0.15 else {}
    strip_rows = {"warpgroup_rows": 128} if draw.strip_tile else {}
    if draw.swap_tile:
        # The swapped block is BN x BM: C.T's tile.
        if _wgmma_takes((bn, bm, bk), {**options, **span}):
            hopper = {"swap_product": "always", **span}
            features.add("swap_product")
            if rng.random() < 0.5:
                # A pair of blocks along m shares B's tile, the swapped product's A.
                hopper["cluster"] = 2
                features.add("swap_product_cluster")
        return hopper
    if draw.compute == "f32" or "convert" in draw.dtypes or \
            not _wgmma_takes((bm, bn, bk), {**options, **span, **strip_rows}):
        return hopper
    split = options.get("split_k", 1) > 1
    hopper = dict(rng.choice(SPLIT_SCHEDULES if split else HOPPER_SCHEDULES))
    if split:
        features.add("wgmma_split_k")
    elif bm == 64 and rng.random() < 0.3:  # two consumer warpgroups of 64 rows each
        hopper = dict(PINGPONG)
    if bm == 128 and bn <= 128 and rng.random() < 0.4 or draw.strip_tile:
        # A consumer warpgroup of 128 rows (two m64 wgmmas a k step): the tile's one
        # warpgroup, or pingpong's two each on a 128-row tile of its own; a strip tile's two.
        rows = dict(rng.choice((hopper, hopper if split or draw.strip_tile else PINGPONG)),
                    warpgroup_rows=128)
        if _wgmma_takes((bm, bn, bk), {**options, **rows}):
            hopper = rows
            features.add("strip_tile" if draw.strip_tile else "warpgroup_rows_128")
    if hopper.get("consumers") == "pingpong":
        features.add("pingpong")
    if hopper.get("persistent") and draw.batched:
        features.add("persistent_batched")
    if hopper.get("cluster") or hopper.get("cluster_n"):
        # A batched one pairs M tiles within each batch.
        features.add("cluster_batched" if draw.batched else "cluster")
        if hopper.get("cluster_n"):
            features.add("cluster_2d")
    if options["stages"] == 1:
        features.add("wgmma_one_stage")
    if span:
        hopper.update(span)
        features.add(f"tma_swizzle_{span['tma_swizzle']}")
    return hopper


def generate_matmul(rng: random.Random, index: int) -> Program:
    """A random matmul kernel with a random epilogue and random options (the draws in this
    order, so a seed makes the same programs)."""
    draw = _draw_operands(rng)
    _draw_tile(rng, draw)
    features: set[str] = {draw.kind} | ({"batched"} if draw.batched else set())
    if draw.kind in ("fp8", "w8") and (draw.dtypes["A"] in FP8 or draw.dtypes["B"] in FP8):
        features.add("fp8_operand")
    names = _draw_names(rng, index, features)
    tree, has_bias, has_scale, bias_row = _draw_epilogue(
        rng, draw, [names["alpha"], names["beta"]], features)
    text, tree, reads_c = _draw_text(rng, draw, names, tree, has_bias, has_scale, bias_row,
                                     features)
    options = _draw_options(rng, draw, features)
    hopper = _draw_hopper(rng, draw, options, features)
    fp8 = any(draw.dtypes[k] in FP8 for k in ("A", "B"))
    return Program(index, "matmul", text, options=options, hopper_options=hopper,
                   features=frozenset(features), dtypes=draw.dtypes, layouts=draw.transposed,
                   tiles=(draw.bm, draw.bn, draw.bk), epilogue=tree, reads_c=reads_c,
                   archs=("sm_90a",) if draw.swap_tile else HOPPER_ARCHS if fp8 else ARCHS,
                   batched=draw.batched)


# ------------------------------------------------------------------------------ mutations

_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+\.?\d*(?:e[+-]?\d+)?|\*\*|//|[-+*/@:=,.()\[\]]|\n[ ]*")
_INSERTS = ("(", ")", "[", "]", ":", ",", "+", "*", "/", "//", "@", ".T", "=", "+=", "\n",
            "\n    ", "\n        ", "\t", " ", "#", "\\\n", "'s'", "if", "for", "None", "-1",
            "0", "2147483648", "4294967296", "10**20", "1e40", "0.1", "é", "_", "A_ptr",
            "relu(", "zeros(", "grid(", "range(", "max(", ".to(f16)", ".to(bf16)", "f16",
            "bf16", "f32", "i32", "cdiv(", "acc", "M", "BK", "lambda", ";", "\r", "\f", "\0",
            "i8", "f8e4m3", "f8e5m2", ".to(i32)", ".to(f8e4m3)", "where(", " > 0", " and ",
            " or ", "not ", "exp(", "gelu(", "sqrt(", "b, ", "Bt, ", "[1, N]", "0:1, ",
            "if ACT == 1:", ".T")
_NUMBERS = ("0", "1", "-1", "7", "3", "2147483647", "2147483648", "4294967296", "1e40",
            "0.5", "1024", "100000000000000000000")


def mutate(rng: random.Random, text: str) -> str:
    """``text`` with one to three random edits."""
    for _ in range(rng.randint(1, 3)):
        tokens = [m for m in _TOKEN.finditer(text)]
        lines = text.split("\n")
        choice = rng.randrange(9)
        if choice == 0 and tokens:  # replace a token with another from the text
            token, other = rng.choice(tokens), rng.choice(tokens)
            text = text[:token.start()] + other.group() + text[token.end():]
        elif choice == 1 and tokens:  # delete a token
            token = rng.choice(tokens)
            text = text[:token.start()] + text[token.end():]
        elif choice == 2:  # insert a token
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(_INSERTS) + text[at:]
        elif choice == 3:  # change a number
            numbers = [t for t in tokens if t.group()[0].isdigit()]
            if numbers:
                token = rng.choice(numbers)
                text = text[:token.start()] + rng.choice(_NUMBERS) + text[token.end():]
        elif choice == 4 and len(lines) > 1:  # delete a line
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif choice == 5:  # duplicate a line
            at = rng.randrange(len(lines))
            lines.insert(at, lines[at])
            text = "\n".join(lines)
        elif choice == 6 and len(lines) > 1:  # swap two lines
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        elif choice == 7:  # truncate
            text = text[:rng.randrange(len(text) + 1)]
        else:  # re-indent a line
            at = rng.randrange(len(lines))
            lines[at] = " " * rng.choice((0, 2, 4, 8, 12, 3)) + lines[at].lstrip()
            text = "\n".join(lines)
    return text


def generate(rng: random.Random, index: int, samples: list[str]) -> Program:
    """The index-th program: 60% generated kernels, 40% mutations."""
    if rng.random() < 0.6:
        return generate_matmul(rng, index)
    base = rng.choice(samples) if rng.random() < 0.6 else generate_matmul(rng, index).text
    suffix = ".py" if rng.random() < 0.8 else ".tile"
    text = mutate(rng, base)
    if suffix == ".tile":
        text = "\n".join(l for l in text.split("\n") if not l.startswith('"""'))
    return Program(index, "mutation", text, suffix=suffix)


# --------------------------------------------------------------------------- evaluation

def _round(values: np.ndarray, dtype: Optional[str]) -> np.ndarray:
    """float64 values rounded to ``dtype`` (round to nearest even), as float64."""
    if dtype == "f16":
        return values.astype(np.float16).astype(np.float64)
    if dtype == "bf16":
        return _bf16_from_bits(_bf16_bits(values))
    if dtype in ("f32", "scalar"):
        return values.astype(np.float32).astype(np.float64)
    return values


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(values, dtype=np.float32))
    return np.where(nan, 0x7FC0, rounded).astype(np.uint16)


def _bf16_from_bits(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def evaluate(program: Program, inputs: dict[str, np.ndarray], scalars: dict[str, float]
             ) -> np.ndarray:
    """C as the program defines it, in float64 from the generator's own knowledge: the
    product, then the epilogue tree, each node rounded to its dtype. ``inputs`` hold the
    exact values (fp8 and i8 ones as float64); an i32 accumulator is summed exactly in
    int64 and wraps to 32 bits as the integer mma does."""
    from tilec.cpu.reference import flush_to_zero
    a = np.swapaxes(inputs["A"], -1, -2) if program.layouts["A"] else inputs["A"]
    b = np.swapaxes(inputs["B"], -1, -2) if program.layouts["B"] else inputs["B"]
    if program.dtypes.get("acc") == "i32":
        sums = np.matmul(a.astype(np.int64), b.astype(np.int64))
        acc = ((sums + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.float64)
    else:
        acc = _round(np.matmul(a, b), "f32")
    leaves = {"acc": acc, "c": inputs["C"], "bias": inputs.get("bias"),
              "scale": inputs.get("scale")}

    def value(tree: Tree) -> Union[np.ndarray, float]:
        kind = tree[0]
        if kind in leaves:
            return leaves[kind]
        if kind == "scalar":
            return scalars[tree[1]]
        if kind == "lit":
            return float(tree[1])
        dtype = _dtype_of(tree, program.dtypes)
        if kind == "to":
            inner = np.asarray(value(tree[2]), dtype=np.float64)
            if dtype == "i32":  # f32 -> i32 is not generated; i32 -> i32 keeps the sums
                return inner
            return _round(inner, dtype)
        if kind == "relu":
            return np.maximum(value(tree[1]), 0.0)
        if kind == "neg":
            return -value(tree[1])
        if kind == "math":
            # 16-bit tiles compute in f32 and round back to their dtype.
            inner = _round(np.asarray(value(tree[2]), dtype=np.float64), "f32")
            # The GPU's .ftz math returns no subnormal (tilec.cpu.reference.FLUSH_BELOW).
            return _round(flush_to_zero(_round(MATH[tree[1]](inner), "f32")), dtype)
        if kind == "where":
            chosen = np.where(condition(tree[1]), *(_operand(t, dtype, value(t))
                                                    for t in (tree[2], tree[3])))
            return _round(np.asarray(chosen, dtype=np.float64), dtype)
        left, right = (_operand(t, dtype, value(t)) for t in (tree[2], tree[3]))
        if kind == "call":
            result = np.minimum(left, right) if tree[1] == "min" else np.maximum(left, right)
        else:
            result = {"+": np.add, "-": np.subtract, "*": np.multiply,
                      "/": np.divide}[tree[1]](left, right)
        return _round(np.asarray(result, dtype=np.float64), dtype)

    def condition(cond: Tree) -> Any:
        if cond[0] == "not":
            return np.logical_not(condition(cond[1]))
        if cond[0] in ("and", "or"):
            join = np.logical_and if cond[0] == "and" else np.logical_or
            return join(condition(cond[1]), condition(cond[2]))
        # The two sides of a comparison promote as arithmetic does.
        dtype = _promote([_dtype_of(cond[2], program.dtypes),
                          _dtype_of(cond[3], program.dtypes)])
        left, right = (_operand(t, dtype, value(t)) for t in (cond[2], cond[3]))
        return COMPARISONS[cond[1]](left, right)

    def _operand(tree: Tree, dtype: Optional[str], raw: Any) -> Any:
        # A number is converted to the tile's dtype before the operation.
        return _round(np.asarray(raw, dtype=np.float64), dtype) if tree[0] == "lit" else raw

    with np.errstate(all="ignore"):
        return np.broadcast_to(value(program.epilogue), acc.shape)


# Against the fuzzer's own float64 evaluation, not tilec's reference: its rounding points
# are the generator's (each cast), so bf16 epilogues drift further than `tilec run` allows.
# Products of 8-bit operands are exact in f32; only the sums round. i32 results are exact.
EVALUATION_TOLERANCE = {"f16": 2e-3, "bf16": 1.6e-2, "f32": 1e-4, "i8": 1e-4,
                        "f8e4m3": 1e-4, "f8e5m2": 1e-4, "i32": 0.0}


# The largest 8-bit float input: over e5m2's whole range (to 57344) the products reached 3e9,
# an f16 C overflowed wherever they did not cancel, and the few finite outputs left were
# differences of such sums, whose f32 rounding EVALUATION_TOLERANCE does not bound (seed 84,
# program 515: 0.028 with no pass run). Values to 8, like the other dtypes' normal inputs,
# keep the outputs finite and the comparison meaningful.
FP8_INPUT_MAX = 8.0


def _inputs(program: Program, name: str, shape: list[int], rng: np.random.Generator
            ) -> tuple[np.ndarray, np.ndarray]:
    """Random host data for one tensor: (its exact values in float64, the array to pass)."""
    from tilec.target import fp8
    dtype = program.dtypes[name]
    if dtype == "i8":
        array = rng.integers(-128, 128, size=shape).astype(np.int8)
        return array.astype(np.float64), array
    if dtype == "i32":
        array = rng.integers(-1000, 1000, size=shape).astype(np.int32)
        return array.astype(np.float64), array
    if dtype in FP8:
        bits = rng.integers(0, 256, size=shape).astype(np.uint8)
        values = fp8.decode(bits, dtype)  # the input quantization only
        # No NaN or inf, and nothing above FP8_INPUT_MAX (those codes read as zeros).
        keep = np.isfinite(values) & (np.abs(values) <= FP8_INPUT_MAX)
        bits = np.where(keep, bits, 0).astype(np.uint8)
        return fp8.decode(bits, dtype).astype(np.float64), bits
    values = _round(rng.standard_normal(shape), dtype)
    return values, (_bf16_bits(values) if dtype == "bf16" else
                    values.astype(np.float16 if dtype == "f16" else np.float32))


def check_on_cpu(program: Program, rng: np.random.Generator) -> Optional[str]:
    """Run the program in the CPU interpreter on random ragged sizes; None when it matches
    :func:`evaluate`, else what differs."""
    from tilec.cpu.interpreter import run_kernel
    from tilec.kernel import load_file
    bm, bn, bk = program.tiles
    sizes = {"M": int(rng.integers(1, 2 * bm + 2)), "N": int(rng.integers(1, 2 * bn + 2)),
             "K": int(rng.integers(1, 3 * bk + 2)), "Bt": int(rng.integers(1, 4))}
    batch = ("Bt",) if program.batched else ()
    shapes = {"A": batch + (("K", "M") if program.layouts["A"] else ("M", "K")),
              "B": batch + (("N", "K") if program.layouts["B"] else ("K", "N")),
              "C": batch + ("M", "N"), "bias": ("N",), "scale": ("M", "1")}
    sizes["1"] = 1
    function = next(iter(load_file(program.filename, program.text).values()))
    kernel = function.lower()
    exact: dict[str, np.ndarray] = {}
    arguments: dict[str, Any] = {}
    for param in kernel.params:
        if param.name not in shapes:
            continue
        shape = [sizes[d] for d in shapes[param.name]]
        if param.name == "bias" and len(param.type.shape) == 2:  # bias: [1, N]
            shape = [1] + shape
        exact[param.name], arguments[param.name] = _inputs(program, param.name, shape, rng)
    if "scale" in exact:  # a column scale near 1, so that products keep their size
        exact["scale"] = _round(1.0 + 0.25 * np.abs(exact["scale"]), "f32")
        arguments["scale"] = exact["scale"].astype(np.float32)
    scalars = {p.name: float(rng.choice((1.5, -0.75, 0.5, 2.0))) for p in kernel.params
               if p.name not in shapes}
    expected = evaluate(program, exact, scalars)
    run_kernel(kernel, {**arguments, **scalars})
    out = arguments["C"]
    got = _bf16_from_bits(out) if program.dtypes["C"] == "bf16" else out.astype(np.float64)
    if program.dtypes["C"] == "i32":
        wrong = int(np.sum(got != expected))
        return f"{wrong} of {got.size} i32 outputs differ at sizes {sizes}" if wrong else None
    if np.isnan(got).any() and not np.isnan(expected).any():
        return f"{int(np.isnan(got).sum())} of {got.size} outputs NaN at sizes {sizes}"
    finite = np.isfinite(expected)
    diff = np.linalg.norm(np.where(finite, got - expected, 0.0))
    norm = np.linalg.norm(np.where(finite, expected, 0.0))
    compute = program.dtypes.get("convert", program.dtypes["A"])
    tolerance = max(EVALUATION_TOLERANCE[d] for d in (compute, program.dtypes["C"]))
    if program.options.get("f32_math") == "tf32":
        tolerance = max(tolerance, 2e-3)
    if diff > tolerance * max(norm, 1.0):
        return f"relative error {diff / max(norm, 1e-30):.3g} at sizes {sizes}"
    return None
