"""Checks the IR's invariants: known ops, counts, attributes, types, that every value is
defined before it is used, and that the schedule agrees with the ops. Runs after every pass in
tests and on request."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

from tilec.ir.core import Block, Kernel, Op, Value
from tilec.ir.ops import IR_OPS, IRError, OpDef, registered_ops
from tilec.ir.schedule import check_schedule


def verify(kernel: Kernel, *, after: Optional[str] = None,
           ops: Optional[Mapping[str, OpDef]] = None) -> None:
    """Raise IRError naming the op (and the pass, when ``after`` is given) that breaks an
    invariant. ``ops`` is the table of known ops; by default the IR layer's
    (:data:`tilec.ir.ops.IR_OPS`: the frontend's and the generic lowered ops) and those passes
    registered. IR holding a family's ops (``frag.mma``, ``copy.*``) is verified against the
    op catalogue: ``ops=tilec.families.catalogue.op_catalogue()``."""
    if ops is None:
        ops = {**IR_OPS, **registered_ops()}
    if len(kernel.body.args) != len(kernel.params) + len(kernel.symbols):
        raise IRError("kernel body arguments do not match params + symbols")
    try:
        _verify_block(kernel.body, set(), ops)
        problems = check_schedule(kernel)
        if problems:
            raise IRError("schedule: " + "; ".join(problems))
    except IRError as err:
        where = f" after pass '{after}'" if after else ""
        raise IRError(f"invalid IR{where}: {err}") from None


def _verify_block(block: Block, visible: set[Value], ops: Mapping[str, OpDef]) -> None:
    scope = set(visible) | set(block.args)
    for op in block.ops:
        _verify_op(op, scope, ops)
        scope.update(op.results)


def _verify_op(op: Op, scope: set[Value], ops: Mapping[str, OpDef]) -> None:
    where = f"{op.name}" + (f" at {op.loc}" if op.loc else "")
    opdef = ops.get(op.name)
    if opdef is None:
        raise IRError(f"{where}: unknown op")
    for label, expected, actual in (("operands", opdef.operands, len(op.operands)),
                                    ("results", opdef.results, len(op.results)),
                                    ("regions", opdef.regions, len(op.regions))):
        if expected is not None and expected != actual:
            raise IRError(f"{where}: expects {expected} {label}, has {actual}")
    for attr in opdef.attrs:
        if attr not in op.attrs:
            raise IRError(f"{where}: missing attribute '{attr}'")
    for value in op.operands:
        if value not in scope:
            raise IRError(f"{where}: uses {value!r} before it is defined")
    for value in op.results:
        if value.owner is not op:
            raise IRError(f"{where}: result {value!r} does not name this op as its owner")
    if opdef.check is not None:
        try:
            opdef.check(op)
        except IRError as err:
            raise IRError(f"{where}: {err}") from None
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as err:
            raise IRError(f"{where}: malformed op ({type(err).__name__}: {err})") from None
    for region in op.regions:
        _verify_block(region, scope, ops)
