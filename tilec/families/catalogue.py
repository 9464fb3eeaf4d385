"""The op catalogue: every op kind the IR may hold, each with its CPU semantics.

It joins, in this one place: the IR layer's ops (:data:`tilec.ir.ops.CORE_OPS`, what the
frontend emits, with the interpreter's semantics, :data:`tilec.cpu.interpreter.SEMANTICS`;
:data:`tilec.ir.ops.GPU_OPS`, the generic lowered ops, with the executor's,
:data:`tilec.cpu.executor.SEMANTICS`), and every registered family's ops, defined with their
semantics in the family's module (:data:`tilec.families.products.OP_DEFS`,
:data:`tilec.families.movements.OP_DEFS`; an op two families share appears once).
:data:`OP_DEFS` is the built-in ops; :func:`op_catalogue` adds the op kinds passes
registered with :func:`tilec.ir.ops.register_op`. Callers running lowered IR
(``run_kernel(..., ops=op_catalogue())``) read it.

:func:`op_definitions` is the same ops as their layers define them, without the IR layer's
CPU semantics: what compiling reads (the verifier's checks, the race checker's folds). The
interpreter and the executor need numpy, so the catalogue imports them when first asked
for (:data:`OP_DEFS` included), and a cold ``tilec compile`` never does.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tilec.ir.ops import CORE_OPS, GPU_OPS, OpDef, registered_ops

from . import movements, products

if TYPE_CHECKING:
    from tilec.cpu.interpreter import SemanticsFn

__all__ = ["OP_DEFS", "op_catalogue", "op_definitions"]


def _definitions(defs: Iterable[OpDef]) -> dict[str, OpDef]:
    definitions: dict[str, OpDef] = {}
    for opdef in defs:
        if opdef.name in definitions:
            raise ValueError(f"op '{opdef.name}' is defined twice")
        definitions[opdef.name] = opdef
    return definitions


# The built-in ops by name as defined, read-only: the IR layer's (no semantics), then the
# families' (with theirs).
_DEFINITIONS: Mapping[str, OpDef] = MappingProxyType(_definitions(
    [*CORE_OPS.values(), *GPU_OPS.values(), *products.OP_DEFS.values(),
     *movements.OP_DEFS.values()]))


def _joined(tables: Iterable[Mapping[str, SemanticsFn]]) -> dict[str, SemanticsFn]:
    semantics: dict[str, SemanticsFn] = {}
    for table in tables:
        twice = sorted(semantics.keys() & table.keys())
        if twice:
            raise ValueError(f"semantics given twice for {', '.join(twice)}")
        semantics.update(table)
    return semantics


def _catalogue(defs: Mapping[str, OpDef], semantics: Mapping[str, SemanticsFn]
               ) -> dict[str, OpDef]:
    catalogue = {name: replace(opdef, evaluate=semantics.get(name, opdef.evaluate))
                 for name, opdef in defs.items()}
    stray = sorted(semantics.keys() - catalogue.keys())
    if stray:
        raise ValueError(f"semantics for ops that are not defined: {', '.join(stray)}")
    return catalogue


@functools.cache
def _op_defs() -> Mapping[str, OpDef]:
    """The built-in ops by name, read-only, with the IR layer's semantics: the interpreter's
    (core ops, and the scalar and split-K ops it needs nothing more for) and the executor's
    (shared memory, barriers, fragment loads from global memory)."""
    from tilec.cpu import executor, interpreter
    return MappingProxyType(_catalogue(
        _DEFINITIONS, _joined((interpreter.SEMANTICS, executor.SEMANTICS))))


def __getattr__(name: str) -> Any:
    if name == "OP_DEFS":  # made on first use: it imports the CPU model (see above)
        return _op_defs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def op_catalogue() -> dict[str, OpDef]:
    """Every op kind known now, with its CPU semantics: the built-in ops and those passes
    registered (register_op keeps them out of the built-in ops' dialects, so the two do not
    overlap)."""
    return {**_op_defs(), **registered_ops()}


def op_definitions() -> dict[str, OpDef]:
    """Every op kind known now as defined (:func:`op_catalogue` less the IR layer's CPU
    semantics): enough to verify IR and fold its scalars, without importing numpy."""
    return {**_DEFINITIONS, **registered_ops()}
