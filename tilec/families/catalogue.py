"""The op catalogue: every op kind the IR may hold, each with its CPU semantics.

The IR (:mod:`tilec.ir.ops`, :mod:`tilec.ir.ops_gpu`) defines each op's structure, type rule,
purity and folding; the CPU interpreter and executors (:mod:`tilec.cpu`) define what each op
does, as plain tables by name. This package sits above both and joins them, in this one
place: :data:`OP_DEFS` is the built-in ops with ``evaluate`` filled in, and
:func:`op_catalogue` adds the op kinds passes registered with
:func:`tilec.ir.ops.register_op`. The verifier, the interpreter and dead-code removal read
the catalogue.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType

from tilec.cpu import executor, executor_simt, executor_tf32, interpreter
from tilec.cpu.interpreter import SemanticsFn
from tilec.ir.ops import CORE_OPS, OpDef, registered_ops
from tilec.ir.ops_gpu import GPU_OPS

__all__ = ["OP_DEFS", "op_catalogue"]

# Where each op's CPU semantics are written: the interpreter (core ops), the executor
# (shared memory, copies, barriers, mma fragments) and the FFMA and tf32 product kinds.
_SEMANTICS_TABLES: tuple[Mapping[str, SemanticsFn], ...] = (
    interpreter.SEMANTICS, executor.SEMANTICS, executor_simt.SEMANTICS,
    executor_tf32.SEMANTICS)


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


# The built-in ops by name, read-only: core ops, then those the passes introduce.
OP_DEFS: Mapping[str, OpDef] = MappingProxyType(
    _catalogue([*CORE_OPS.values(), *GPU_OPS], _joined(_SEMANTICS_TABLES)))


def op_catalogue() -> dict[str, OpDef]:
    """Every op kind known now: the built-in ops and those passes registered (register_op
    refuses a name already defined, so the two do not overlap)."""
    return {**OP_DEFS, **registered_ops()}
