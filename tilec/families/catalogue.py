"""The op catalogue: every op kind the IR may hold, each with its CPU semantics.

It joins, in this one place: the IR layer's ops (:data:`tilec.ir.ops.CORE_OPS`, what the
frontend emits, with the interpreter's semantics, :data:`tilec.cpu.interpreter.SEMANTICS`;
:data:`tilec.ir.ops.GPU_OPS`, the generic lowered ops, with the executor's,
:data:`tilec.cpu.executor.SEMANTICS`), and every registered family's ops, defined with their
semantics in the family's module (:data:`tilec.families.products.OP_DEFS`,
:data:`tilec.families.movements.OP_DEFS`; an op two families share appears once).
:data:`OP_DEFS` is the built-in ops; :func:`op_catalogue` adds the op kinds passes
registered with :func:`tilec.ir.ops.register_op`. The passes, the race checker and callers
running or verifying lowered IR (``run_kernel(..., ops=op_catalogue())``,
``verify(..., ops=op_catalogue())``) read it.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from tilec.cpu import executor, interpreter
from tilec.cpu.interpreter import SemanticsFn
from tilec.ir.ops import CORE_OPS, GPU_OPS, OpDef, registered_ops

from . import movements, products

__all__ = ["OP_DEFS", "op_catalogue"]

# Where the IR layer's ops get their CPU semantics: the interpreter (core ops, and the
# scalar and split-K ops it needs nothing more for) and the executor (shared memory,
# barriers, fragment loads from global memory).
_SEMANTICS_TABLES: tuple[Mapping[str, SemanticsFn], ...] = (
    interpreter.SEMANTICS, executor.SEMANTICS)


def _joined(tables: Iterable[Mapping[str, SemanticsFn]]) -> dict[str, SemanticsFn]:
    semantics: dict[str, SemanticsFn] = {}
    for table in tables:
        twice = sorted(semantics.keys() & table.keys())
        if twice:
            raise ValueError(f"semantics given twice for {', '.join(twice)}")
        semantics.update(table)
    return semantics


def _catalogue(defs: Iterable[OpDef], semantics: Mapping[str, SemanticsFn]
               ) -> dict[str, OpDef]:
    catalogue: dict[str, OpDef] = {}
    for opdef in defs:
        if opdef.name in catalogue:
            raise ValueError(f"op '{opdef.name}' is defined twice")
        evaluate = semantics.get(opdef.name, opdef.evaluate)
        catalogue[opdef.name] = replace(opdef, evaluate=evaluate)
    stray = sorted(semantics.keys() - catalogue.keys())
    if stray:
        raise ValueError(f"semantics for ops that are not defined: {', '.join(stray)}")
    return catalogue


# The built-in ops by name, read-only: the IR layer's, then the families'.
OP_DEFS: Mapping[str, OpDef] = MappingProxyType(_catalogue(
    [*CORE_OPS.values(), *GPU_OPS.values(), *products.OP_DEFS.values(),
     *movements.OP_DEFS.values()],
    _joined(_SEMANTICS_TABLES)))


def op_catalogue() -> dict[str, OpDef]:
    """Every op kind known now: the built-in ops and those passes registered (register_op
    keeps them out of the built-in ops' dialects, so the two do not overlap)."""
    return {**OP_DEFS, **registered_ops()}
