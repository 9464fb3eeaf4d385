"""The registry of product families: the one place that lists them.

Tiling asks :func:`family_for` which family multiplies tiles of a dtype; every later stage
asks :func:`family_of` which family a plan computes with. The backend's op table takes
:data:`EMITTERS` from here, the op catalogue :data:`OP_DEFS` (each family's ops with their
CPU semantics; an op two families share once, run by the family its result layout names);
the hazard checker and explain take :data:`LOAD_OPS` and :data:`PRODUCT_OPS`. A new family
is a module and one entry in :data:`FAMILIES`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from tilec.ir.core import Op
from tilec.ir.ops import EvaluateFn, OpDef
from tilec.ir.schedule import TilingPlan

from . import ffma, fp8, int8, mma_sync, tf32, wgmma, wgmma8, wgmma_rs
from .product import Emitter, ProductFamily

# Lookup order matters to family_for only: the first family taking a dtype (under the
# Options.f32_math given, and the block and target for families restricted to some) wins.
FAMILIES: tuple[ProductFamily, ...] = (wgmma.FAMILY, wgmma_rs.FAMILY, mma_sync.FAMILY,
                                       ffma.FAMILY, tf32.FAMILY, wgmma8.FAMILY, int8.FAMILY,
                                       fp8.FAMILY)
_BY_NAME = {family.name: family for family in FAMILIES}

# Each op once (the mma and tf32 families share frag.mma).
# Then the loads of 8-bit operands converted in registers (w8a16's frag.ldbytes).
LOAD_OPS = tuple(op for op in dict.fromkeys([family.load_op for family in FAMILIES]
                                            + [family.byte_load_op for family in FAMILIES])
                 if op is not None)
PRODUCT_OPS = tuple(dict.fromkeys(family.product_op for family in FAMILIES))


def family_named(name: str) -> ProductFamily:
    """The family a plan's ``kind`` or a distributed layout's ``kind`` names."""
    return _BY_NAME[name]


def family_of(plan: TilingPlan) -> ProductFamily:
    """The family a tiling plan (:class:`tilec.ir.schedule.TilingPlan`) computes with."""
    return _BY_NAME[plan.kind]


# The wgmma families by the dtypes they take: 16-bit operands, 8-bit ones.
WGMMA_FAMILIES: tuple[ProductFamily, ...] = (wgmma.FAMILY, wgmma8.FAMILY)


def wgmma_declined(plan: TilingPlan, options: Any) -> str:
    """Why, on a target with wgmma, the wgmma family of the plan's dtype (wgmma8's for 8-bit
    operands) left its block to an older family: what explain and the tiling pass's errors
    say of a fallback. '' where a TMA family computes the block, off those targets, or for a
    dtype no wgmma family takes (f32)."""
    family = _BY_NAME.get(plan.kind)
    if options.arch not in wgmma.FAMILY.archs or (family is not None and
                                                  family.movement == wgmma.FAMILY.movement):
        return ""
    taker = next((f for f in WGMMA_FAMILIES if plan.dtype in f.dtypes), None)
    return (taker.declined(plan.block, options, plan.operands) or "") if taker else ""


def family_for(dtype: str, f32_math: str = "ffma", block: Any = None,
               options: Any = None, operands: Any = ()) -> ProductFamily:
    """The family for operand tiles of ``dtype`` (``f32_math``: Options.f32_math, which
    picks among the f32 families); with a ``block`` tile and ``options``, families
    restricted to some targets or tiles take it where they apply (wgmma on sm_90a), and
    without them never. KeyError names the dtypes taken."""
    for family in FAMILIES:
        if dtype not in family.dtypes or family.f32_math not in (None, f32_math):
            continue
        restricted = family.archs is not None
        if not restricted or (block is not None and family.applies(block, options, operands)):
            return family
    taken = ", ".join(dict.fromkeys(d for family in FAMILIES for d in family.dtypes))
    raise KeyError(f"tiles of {dtype} cannot be multiplied (the backend takes {taken})")


def _through_plan(name: str) -> Emitter:
    """An emitter for an op several families share: the plan's family emits it."""
    def emit(ctx, op: Op) -> None:
        family_of(ctx.plan).emitters[name](ctx, op)
    emit.__name__ = f"emit_{name.replace('.', '_')}"
    return emit


def _emitters() -> dict[str, Emitter]:
    owners: dict[str, list[ProductFamily]] = {}
    for family in FAMILIES:
        for name in family.emitters:
            owners.setdefault(name, []).append(family)
    return {name: families[0].emitters[name] if len(families) == 1 else _through_plan(name)
            for name, families in owners.items()}


# The PTX emitters of every family's ops, for tilec.backend.ptx's op table.
EMITTERS: dict[str, Emitter] = _emitters()


def _through_layout(name: str, by_family: dict[str, EvaluateFn]) -> EvaluateFn:
    """CPU semantics for an op several families share: those of the family the result's
    layout names (frag.mma's accumulator: an mma or a tf32 layout)."""
    def evaluate(state: Any, op: Op, operands: list[Any]) -> Any:
        kind = getattr(op.result.type.layout, "kind", None)
        if kind not in by_family:
            raise state.error(op, f"no {name} on fragments of kind {kind!r} (families "
                                  f"defining it: {', '.join(by_family)})")
        return by_family[kind](state, op, operands)
    evaluate.__name__ = f"evaluate_{name.replace('.', '_')}"
    return evaluate


def _op_defs() -> dict[str, OpDef]:
    owners: dict[str, list[tuple[ProductFamily, OpDef]]] = {}
    for family in FAMILIES:
        for opdef in family.op_defs():
            owners.setdefault(opdef.name, []).append((family, opdef))
    joined = {}
    for name, defs in owners.items():
        first = defs[0][1]
        if any(replace(d, evaluate=None) != replace(first, evaluate=None) for _, d in defs):
            raise ValueError(f"families define {name} differently")
        # One meaning for all (wgmma.wait, which has no result to dispatch on), or the
        # meaning of the family the result's layout names.
        same = all(d.evaluate is first.evaluate for _, d in defs)
        evaluate = first.evaluate if same else _through_layout(
            name, {family.name: d.evaluate for family, d in defs})
        joined[name] = replace(first, evaluate=evaluate)
    return joined


# Every family's ops with their CPU semantics, each op once, for the op catalogue.
OP_DEFS: dict[str, OpDef] = _op_defs()
