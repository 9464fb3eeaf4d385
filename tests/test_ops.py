"""The op catalogue: every op's semantics, purity and folding, read from its definition."""
from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from tilec.analysis import folding
from tilec.cpu import reference
from tilec.cpu.interpreter import InterpreterError, InterpState
from tilec.families import movements, products
from tilec.families.catalogue import OP_DEFS, op_catalogue
from tilec.frontend import arithmetic
from tilec.ir import I32, PRED, Block, Builder, Kernel, Op, ScalarType, Value, arith
from tilec.ir.ops import BUILTIN_DIALECTS, CORE_OPS, GPU_OPS, MATH_FUNCTIONS
from tilec.ir.types import F32, TileType
from tilec.launch.binding import grid_size
from tilec.passes.common import drop_dead

I32_SCALAR = ScalarType(I32)
INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1
# Negatives, zero, the i32 extremes and values whose sums, differences and products wrap.
SWEEP = [INT_MIN, INT_MIN + 1, -46341, -7, -3, -1, 0, 1, 2, 3, 7, 46341, INT_MAX - 1, INT_MAX]
INTEGER_OPS = ["add", "sub", "mul", "floordiv", "cdiv", "mod", "min", "max"]
# Ops with effects beyond their results: the launch, stores, control flow, shared memory
# reservations, copies, synchronisation and the split-K and stream-K meetings.
IMPURE = {"tile.grid", "tile.store", "scf.for", "scf.yield", "smem.alloc",
          "copy.global_to_shared", "copy.commit", "copy.wait", "gpu.barrier", "split.reduce",
          "mbar.alloc", "mbar.arrive_expect_tx", "tma.load", "mbar.wait", "mbar.arrive",
          "cluster.sync", "ws.turn_wait", "ws.turn_pass",
          "ws.producer", "wgmma.wait", "ws.sk_fixup"}


# ----------------------------------------------------------------------------------------
# the catalogue

def test_every_op_is_executable() -> None:
    assert set(OP_DEFS) == set(CORE_OPS) | set(GPU_OPS) | set(products.OP_DEFS) | set(
        movements.OP_DEFS)
    missing = [name for name, opdef in OP_DEFS.items() if opdef.evaluate is None]
    assert missing == []


def test_every_built_in_op_is_in_a_dialect_register_op_refuses() -> None:
    assert {name.partition(".")[0] for name in OP_DEFS} == BUILTIN_DIALECTS


def test_the_catalogue_keeps_each_definition_and_adds_only_its_semantics() -> None:
    for opdef in [*CORE_OPS.values(), *GPU_OPS.values()]:
        entry = OP_DEFS[opdef.name]
        assert opdef.evaluate is None
        assert (entry.check, entry.pure, entry.fold, entry.attrs) == (
            opdef.check, opdef.pure, opdef.fold, opdef.attrs)


def test_purity_is_declared_per_op() -> None:
    assert {name for name, opdef in OP_DEFS.items() if not opdef.pure} == IMPURE


def test_the_elementwise_ops_are_those_that_follow_a_layout() -> None:
    elementwise = {name for name, opdef in OP_DEFS.items() if opdef.elementwise}
    assert elementwise == {"tile.full", "tile.splat", "tile.add", "tile.sub", "tile.mul",
                           "tile.div", "tile.max", "tile.min", "tile.neg", "tile.relu",
                           "tile.cast", "tile.where", "split.reduce", "ws.sk_fixup",
                           *(f"tile.{name}" for name in MATH_FUNCTIONS)}


def test_the_ir_does_not_import_the_cpu_and_the_executor_no_family() -> None:
    script = ("import sys, tilec.ir.verifier, tilec.ir.ops, tilec.ir.arith\n"
              "assert not [m for m in sys.modules if m.startswith('tilec.cpu')], 'ir -> cpu'\n"
              "import tilec.cpu.executor\n"
              "assert not [m for m in sys.modules if m.startswith('tilec.families')]\n")
    subprocess.run([sys.executable, "-c", script], check=True)


# ----------------------------------------------------------------------------------------
# dead-code removal

def _dead_op(name: str) -> Op:
    """An op of kind ``name`` with one result that nothing uses."""
    op = Op(name, [], [])
    op.results.append(Value(I32_SCALAR, "r", op))
    return op


def test_pure_ops_with_unused_results_are_dropped_and_impure_ones_kept() -> None:
    block = Block()
    block.ops = [_dead_op(name) for name in OP_DEFS]
    drop_dead(block)
    assert {op.name for op in block.ops} == IMPURE


def test_dead_code_removal_follows_chains_and_regions() -> None:
    body = Block()
    b = Builder(body)
    one = b.value("arith.constant", [], I32_SCALAR, value=1)
    kept = b.value("arith.add", [one, one], I32_SCALAR)
    two = b.value("arith.constant", [], I32_SCALAR, value=2)
    dead = b.value("arith.mul", [two, two], I32_SCALAR)
    b.value("arith.sub", [dead, one], I32_SCALAR)  # unused: takes mul and two with it
    loop_body = Block()
    induction = loop_body.add_arg(I32_SCALAR, "i")
    with b.at(loop_body):
        b.value("arith.add", [induction, one], I32_SCALAR)  # dead, inside a region
        b.op("scf.yield")
    b.op("scf.for", [one, kept, one], [], {"step_const": 1}, [loop_body])
    drop_dead(body)
    assert [op.name for op in body.ops] == ["arith.constant", "arith.add", "scf.for"]
    assert [op.name for op in loop_body.ops] == ["scf.yield"]


def test_an_op_a_table_does_not_know_is_kept() -> None:
    block = Block()
    block.ops = [_dead_op("arith.add"), _dead_op("user.unknown")]
    drop_dead(block, {"arith.add": OP_DEFS["arith.add"]})
    assert [op.name for op in block.ops] == ["user.unknown"]


# ----------------------------------------------------------------------------------------
# folding: one definition of the scalar arithmetic

def _wrapped(value: int) -> int:
    """An independent oracle for the i32 wraparound: numpy's."""
    return int(np.array(value, dtype=np.int64).astype(np.int32))


def _oracle(name: str, a: int, b: int) -> int:
    exact = {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}
    if name in ("floordiv", "cdiv", "mod"):
        quotient = int(np.floor_divide(np.int64(a), np.int64(b)))
        exact = {"floordiv": quotient, "mod": a - quotient * b,
                 "cdiv": -int(np.floor_divide(np.int64(-a), np.int64(b)))}
    return _wrapped(exact[name])


def _interpret(name: str, operands: list[int], attrs: dict[str, Any] | None = None,
               result: ScalarType = I32_SCALAR) -> Any:
    """The interpreter's value of one scalar op on the given operand values."""
    body = Block()
    args = [body.add_arg(I32_SCALAR, f"x{i}") for i in range(len(operands))]
    op = Builder(body).op(name, args, [result], attrs or {})
    state = InterpState(Kernel("scalar", [], [], {}, body), op_catalogue())
    state.env.update(zip(args, operands))
    state.run_op(op)
    return state.env[op.result]


@pytest.mark.parametrize("name", INTEGER_OPS)
def test_fold_equals_the_interpreter_and_wraps_like_i32(name: str) -> None:
    fold = OP_DEFS[f"arith.{name}"].fold
    for a, b in itertools.product(SWEEP, repeat=2):
        if b == 0 and name in arith.INTEGER_ONLY:
            continue
        expected = _oracle(name, a, b)
        assert fold([a, b], {}, I32) == expected, (name, a, b)
        assert _interpret(f"arith.{name}", [a, b]) == expected, (name, a, b)


@pytest.mark.parametrize("name", sorted(arith.INTEGER_ONLY))
def test_a_zero_divisor_is_an_error_in_both(name: str) -> None:
    with pytest.raises(ZeroDivisionError):
        OP_DEFS[f"arith.{name}"].fold([7, 0], {}, I32)
    with pytest.raises(InterpreterError, match="integer division by zero"):
        _interpret(f"arith.{name}", [7, 0])


def test_the_other_scalar_folds_equal_the_interpreter() -> None:
    for a, b in itertools.product(SWEEP, repeat=2):
        assert OP_DEFS["arith.lt"].fold([a, b], {}, PRED) is (a < b)
        assert _interpret("arith.lt", [a, b], result=ScalarType(PRED)) is (a < b)
    for modulus in (1, 2, 3):
        for a in range(modulus):
            attrs = {"modulus": modulus}
            expected = (a + 1) % modulus
            assert OP_DEFS["arith.wrap_inc"].fold([a], attrs, I32) == expected
            assert _interpret("arith.wrap_inc", [a], attrs) == expected
    for flag, a, b in itertools.product((True, False), SWEEP[:3], SWEEP[-3:]):
        expected = a if flag else b
        assert OP_DEFS["arith.select"].fold([flag, a, b], {}, I32) == expected
        assert _interpret("arith.select", [flag, a, b]) == expected
    for value in (INT_MAX + 1, -5):
        assert OP_DEFS["arith.constant"].fold([], {"value": value}, I32) == _wrapped(value)
        assert _interpret("arith.constant", [], {"value": value}) == _wrapped(value)


def test_floats_are_not_folded() -> None:
    with pytest.raises(TypeError, match="only integers are folded"):
        OP_DEFS["arith.add"].fold([1.5, 2.0], {}, F32)
    assert OP_DEFS["arith.div"].fold is None


# ----------------------------------------------------------------------------------------
# the former copies of the arithmetic now use the one module

def test_the_frontend_folds_constants_with_the_exact_arithmetic() -> None:
    names = dict(arithmetic.SCALAR_OPS)
    assert {spelling: arithmetic.FOLD[spelling](-7, 2) for spelling in names} == {
        spelling: arith.EXACT[name](-7, 2) for spelling, name in names.items()}
    assert arithmetic.FOLD["cdiv"](-7, 2) == -3 and arithmetic.FOLD["%"](-7, 2) == 1
    assert set(arithmetic.INTEGER_ONLY) == {"//", "%", "cdiv"}
    assert arithmetic.FOLD["*"](2 ** 31, 2) == 2 ** 32  # DSL constants do not wrap


def test_the_reference_wraps_integers_and_keeps_floats_exact() -> None:
    body = Block()
    a, b = body.add_arg(I32_SCALAR, "a"), body.add_arg(I32_SCALAR, "b")
    x, y = body.add_arg(ScalarType(F32), "x"), body.add_arg(ScalarType(F32), "y")
    builder = Builder(body)
    product = builder.value("arith.mul", [a, b], I32_SCALAR)
    quotient = builder.value("arith.div", [x, y], ScalarType(F32))
    assert reference.fold_scalar(product.owner, [2 ** 30, 4]) == 0
    assert reference.fold_scalar(product.owner, [-7, 3]) == -21
    assert reference.fold_scalar(quotient.owner, [1.0, 3.0]) == 1.0 / 3.0


def test_the_launch_evaluates_grid_sizes_by_the_folds() -> None:
    body = Block()
    m = body.add_arg(I32_SCALAR, "M")
    b = Builder(body)
    block = b.value("arith.constant", [], I32_SCALAR, value=-64)
    big = b.value("arith.constant", [], I32_SCALAR, value=INT_MAX)
    tiles = b.value("arith.cdiv", [m, block], I32_SCALAR)  # -(M // 64), rounded up
    wrapped = b.value("arith.add", [big, big], I32_SCALAR)  # -2
    b.op("tile.grid", [tiles, wrapped], [I32_SCALAR, I32_SCALAR])
    kernel = Kernel("grid", [], ["M"], {}, body)
    assert grid_size(kernel, {"M": 130}) == [-2, -2]


def test_the_race_checkers_fold_known_values_and_leave_unknown_ones() -> None:
    body = Block()
    a, b = body.add_arg(I32_SCALAR, "a"), body.add_arg(I32_SCALAR, "b")
    builder = Builder(body)
    catalogue = op_catalogue()
    for name in INTEGER_OPS:
        op = builder.value(f"arith.{name}", [a, b], I32_SCALAR).owner
        for x, y in itertools.product(SWEEP, [-3, 7, INT_MAX]):
            assert folding.fold(op, [x, y], catalogue) == _oracle(name, x, y)
        assert folding.fold(op, [5, None], catalogue) is None
    divide = builder.value("arith.mod", [a, b], I32_SCALAR).owner
    assert folding.fold(divide, [5, 0], catalogue) is None
    tile = builder.value("tile.full", [], TileType(F32, (2,)), shape=[2], value=0.0).owner
    assert not folding.folds_to_scalar(tile, catalogue)
