"""The registry of data-movement families (``tilec/families/movement.py``): the backend's op
table (``backend/copies.py``), the kernel's parameter list (``backend/signature.py``), the
race checker (``tilec/analysis/hazards.py``) and double buffering
(``passes/double_buffer.py``) read it, and the op catalogue (``catalogue.py``) its ops'
definitions (:data:`OP_DEFS`). A new family (TMA + mbarrier) is a new module and a new
entry here."""
from __future__ import annotations

from tilec.ir.ops import OpDef

from . import tma
from .products import family_named
from .cp_async import CpAsyncFamily
from .movement import MovementFamily

MOVEMENT_FAMILIES: dict[str, MovementFamily] = {
    family.name: family for family in (CpAsyncFamily(), tma.FAMILY)
}

# Which family owns each IR op; the families' op sets are disjoint.
FAMILY_OF_OP: dict[str, MovementFamily] = {
    name: family for family in MOVEMENT_FAMILIES.values() for name in family.ops
}
# Every op that fills a shared buffer stage, whichever family owns it.
STAGE_WRITERS: frozenset[str] = frozenset(
    name for family in MOVEMENT_FAMILIES.values() for name in family.stage_writers)


# Every family's ops with their CPU semantics, for the op catalogue.
OP_DEFS: dict[str, OpDef] = {
    opdef.name: opdef for family in MOVEMENT_FAMILIES.values() for opdef in family.op_defs()
}


def pipeline_family(kind: str) -> MovementFamily:
    """The family double buffering builds the K loop's pipeline with: the one the plan's
    product family (``kind``) reads its operands through, cp.async groups for the
    register-fragment families, TMA + mbarrier for wgmma."""
    return MOVEMENT_FAMILIES[family_named(kind).movement]
