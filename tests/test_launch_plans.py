"""A plain call's launch plan is kept per argument layout (tilec/launch/plans.py): calls that
agree on every fact a plan reads share one, calls that differ in any of them do not."""
from __future__ import annotations

import dataclasses

import pytest

from tilec.launch import plans
from tilec.pipeline import Pass, _REGISTERED, register_pass
from tilec.runtime.arrays import ArrayArg

KERNEL = object()  # plan keys hold the kernel object itself: identity is what they compare
SOURCE = "source-key"
SYMBOLS = {"M": 128, "N": 128, "K": 64}


def arrays(base: int = 0x7F00_0000_0000, **changes) -> dict[str, ArrayArg]:
    made = {"A": ArrayArg("A", base, "f16", (128, 64), (64, 1), 0),
            "B": ArrayArg("B", base + 0x10_0000, "f16", (64, 128), (128, 1), 0),
            "C": ArrayArg("C", base + 0x20_0000, "f32", (128, 128), (128, 1), 0)}
    for name, fields in changes.items():
        made[name] = dataclasses.replace(made[name], **fields)
    return made


def key(tensors=None, options=None, symbols=None, kernel=KERNEL, source=SOURCE):
    return plans.plan_key(kernel, {"arch": "sm_90a"} if options is None else options,
                          arrays() if tensors is None else tensors,
                          SYMBOLS if symbols is None else symbols, source)


def test_other_buffers_of_the_same_layout_share_a_plan():
    assert key() == key(arrays(base=0x7F00_4000_0000))  # pointers 256-byte aligned alike
    assert key() is not None


@pytest.mark.parametrize("changed", [
    dict(tensors=arrays(A=dict(ptr=0x7F00_0000_0002))),  # 2-byte aligned A: packed
    dict(tensors=arrays(A=dict(ptr=0x7F00_0000_0010))),  # 16 bytes past a 256-byte line
    dict(tensors=arrays(A=dict(strides=(72, 1)))),
    dict(tensors=arrays(A=dict(strides=(1, 128)))),
    dict(tensors=arrays(C=dict(dtype="f16"))),
    dict(tensors=arrays(A=dict(shape=(120, 64)))),
    dict(symbols={**SYMBOLS, "M": 120}),
    dict(options={"arch": "sm_90"}),
    dict(options={"arch": "sm_90a", "stages": 4}),
    dict(kernel=object()),
    dict(source="another source"),
])
def test_any_fact_a_plan_reads_changes_the_key(changed):
    assert key(**changed) != key()


def test_no_plan_is_kept_where_compiles_are_not_cached(monkeypatch):
    assert key(source=None) is None
    assert key(options={"arch": "sm_90a", "warps": [2, 2]}) is None  # unhashable: afresh
    monkeypatch.setenv("TILEC_DUMP_DIR", "/tmp/dumps")
    assert key() is None


def test_a_registered_pass_changes_the_key():
    before = key()
    register_pass(Pass("noop", lambda kernel, options: kernel), after="swizzle")
    try:
        assert key() != before
    finally:
        _REGISTERED.clear()
    assert key() == before


def test_plans_are_kept_up_to_a_bound_least_recently_used_first(monkeypatch):
    monkeypatch.setattr(plans, "PLANS_KEPT", 3)
    plans.forget_plans()
    keys = [key(symbols={**SYMBOLS, "M": m}) for m in (1, 2, 3, 4)]
    for k in keys[:3]:
        plans.keep_plan(k, f"plan {k[4]}")
    assert plans.kept_plan(keys[0]) is not None  # used: now the most recent
    plans.keep_plan(keys[3], "plan 4")
    assert plans.kept_plan(keys[1]) is None  # the least recently used went
    assert [plans.kept_plan(k) is not None for k in (keys[0], keys[2], keys[3])] == [True] * 3
    assert plans.kept_plan(None) is None
    plans.keep_plan(None, "ignored")
    plans.forget_plans()
    assert plans.kept_plan(keys[0]) is None
