"""The launch plans of plain calls (``kernel(A, B, C)``), kept per argument layout.

Why: a plain call decides, from its arguments, the launch spec, which operands to pack and
which compiled kernel to launch; that is about 100 us of host time a call, spent again on
every call with arrays laid out as the last ones. What those decisions read of an array is
its dtype, shape and strides and how its address is aligned (16 bytes at most: vectors and
TMA), plus the shape symbols, the options and the pass list; a call that agrees with an
earlier one on all of these gets that call's plan. The pointers themselves are never part
of a plan: every call still builds its own argument list (and tensor maps) from its arrays.

A pipeline whose compiles are not cached (no source key, or ``TILEC_DUMP_DIR`` set, which
asks for every compile's stages) gets no kept plan either: its calls plan afresh.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from typing import Any, Optional

# Above any alignment a plan reads: two addresses equal modulo this are aligned alike.
PLAN_ALIGNMENT = 256
PLANS_KEPT = 256  # the least recently used plan goes beyond this many

_PLANS: "OrderedDict[Hashable, Any]" = OrderedDict()
_LOCK = threading.Lock()  # calls from several threads share the plans


def plan_key(kernel: Any, option_args: Mapping[str, Any], tensors: Mapping[str, Any],
             symbols: Mapping[str, int], source_key: Optional[str]) -> Optional[Hashable]:
    """What a call's plan depends on, or None when it must not be kept."""
    if source_key is None or os.environ.get("TILEC_DUMP_DIR"):
        return None
    from tilec.pipeline import registered_passes
    layouts = tuple((name, arg.dtype, tuple(arg.shape), tuple(arg.strides),
                     arg.ptr % PLAN_ALIGNMENT) for name, arg in tensors.items())
    key = (kernel, source_key, tuple(sorted(option_args.items())), layouts,
           tuple(sorted(symbols.items())), registered_passes())
    try:
        hash(key)
    except TypeError:  # an option given as a list, say: plan each call afresh
        return None
    return key


def kept_plan(key: Optional[Hashable]) -> Any:
    """The plan kept under ``key``, or None."""
    if key is None:
        return None
    with _LOCK:
        plan = _PLANS.get(key)
        if plan is not None:
            _PLANS.move_to_end(key)
        return plan


def keep_plan(key: Optional[Hashable], plan: Any) -> None:
    if key is None:
        return
    with _LOCK:
        _PLANS[key] = plan
        _PLANS.move_to_end(key)
        while len(_PLANS) > PLANS_KEPT:
            _PLANS.popitem(last=False)


def forget_plans() -> None:
    with _LOCK:
        _PLANS.clear()
