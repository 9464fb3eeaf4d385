"""The data-movement families' registry: every family provides every hook, the backend's op
table and the race checker take them in, and double buffering builds with their op names."""
from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from tilec.analysis.hazards import FAMILY_OF_OP as CHECKED_OPS
from tilec.backend.abi import AbiParam
from tilec.backend.ptx import EMITTERS
from tilec.families.catalogue import OP_DEFS
from tilec.ir.ops import IR_OPS
from tilec.families.movement import CompletionWords, MovementFamily, PipelineOps
from tilec.families.movements import (FAMILY_OF_OP, MOVEMENT_FAMILIES, STAGE_WRITERS,
                                      pipeline_family)
from tilec.kernel import load_file

from .test_abi import SAMPLES

FAMILIES = list(MOVEMENT_FAMILIES.values())
HOOKS = [name for name, member in inspect.getmembers(MovementFamily)
         if getattr(member, "__isabstractmethod__", False)]


def test_the_base_class_names_the_hooks() -> None:
    assert set(HOOKS) == {"emitters", "pipelined_copy_attrs", "trace_op", "completes_on_issue",
                          "observe", "describe", "kernel_params", "op_defs",
                          "visible_at_barrier"}
    assert all(inspect.getdoc(getattr(MovementFamily, hook)) for hook in HOOKS)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_family_provides_every_hook(family: MovementFamily) -> None:
    assert MOVEMENT_FAMILIES[family.name] is family
    for hook in HOOKS:
        assert getattr(type(family), hook) is not getattr(MovementFamily, hook), hook
    assert family.ops and set(family.emitters()) == set(family.ops)
    assert isinstance(family.pipeline, PipelineOps)
    assert {family.pipeline.copy, family.pipeline.commit, family.pipeline.wait} <= family.ops
    assert family.pipeline.copy in family.stage_writers <= family.ops
    assert isinstance(family.words, CompletionWords)
    assert all(getattr(family.words, f.name) for f in fields(CompletionWords))
    assert family.words.completer in family.ops


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_the_backend_and_the_checker_take_the_family_in(family: MovementFamily) -> None:
    for name, emitter in family.emitters().items():
        assert EMITTERS[name] is emitter
        assert FAMILY_OF_OP[name] is family and CHECKED_OPS[name] is family
    assert family.stage_writers <= STAGE_WRITERS
    kernel = load_file(SAMPLES / "matmul.py")["matmul"].compile().kernel
    params = family.kernel_params(kernel)
    assert isinstance(params, tuple) and all(isinstance(p, AbiParam) for p in params)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_the_family_defines_its_ops_with_their_semantics(family: MovementFamily) -> None:
    defs = family.op_defs()
    assert {opdef.name for opdef in defs} == family.ops and len(defs) == len(family.ops)
    for opdef in defs:
        assert opdef.evaluate is not None, opdef.name
        assert OP_DEFS[opdef.name] == opdef  # the catalogue holds the family's definition
        assert opdef.name not in IR_OPS  # defined once: by the family, not the IR layer


def test_the_families_ops_are_disjoint() -> None:
    total = sum(len(family.ops) for family in FAMILIES)
    assert len(FAMILY_OF_OP) == total


def test_double_buffering_builds_with_the_pipeline_familys_ops() -> None:
    family = pipeline_family("mma")
    kernel = load_file(SAMPLES / "matmul.py")["matmul"].compile(stages=3).kernel
    names = {op.name for op in kernel.walk()}
    assert {family.pipeline.copy, family.pipeline.commit, family.pipeline.wait} <= names
    copies = [op for op in kernel.walk() if op.name == family.pipeline.copy]
    assert copies and all(op.attrs["mode"] == "async" for op in copies)


def test_each_product_family_is_fed_by_its_movement_family() -> None:
    assert pipeline_family("mma").name == pipeline_family("simt").name == "cp.async"
    assert pipeline_family("wgmma").name == "tma"
