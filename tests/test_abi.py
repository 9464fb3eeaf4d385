"""Typed kernel parameters: each type's PTX declaration and host encoding, the cache's JSON
form, and the parameter list a compiled kernel gets."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tilec.backend.abi import (F32_PARAM, I32_PARAM, I64_PARAM, POINTER, TENSOR_MAP, AbiParam,
                               BlobParam, ScalarParam, param_type)
from tilec.backend.signature import kernel_abi
from tilec.kernel import load_file

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.mark.parametrize("ptype, declaration", [
    (POINTER, ".param .u64 x"),
    (I32_PARAM, ".param .u32 x"),
    (I64_PARAM, ".param .s64 x"),
    (F32_PARAM, ".param .f32 x"),
    (TENSOR_MAP, ".param .align 64 .b8 x[128]"),
    (BlobParam(16, 16), ".param .align 16 .b8 x[16]"),
])
def test_each_type_declares_itself(ptype, declaration) -> None:
    assert ptype.declaration("x") == declaration
    assert param_type(ptype.spelling) == ptype


@pytest.mark.parametrize("ptype, value, encoded", [
    (POINTER, 0x1122_3344_5566_7788, bytes.fromhex("8877665544332211")),
    (I32_PARAM, -2, b"\xfe\xff\xff\xff"),
    (I64_PARAM, -(2**40), struct.pack("<q", -(2**40))),
    (F32_PARAM, 1.5, struct.pack("<f", 1.5)),
    (TENSOR_MAP, bytes(range(128)), bytes(range(128))),
])
def test_each_type_encodes_the_bytes_the_driver_copies(ptype, value, encoded) -> None:
    assert ptype.encode(value) == encoded
    assert len(encoded) == ptype.size
    assert struct.calcsize("<" + ptype.struct_format) == ptype.size


def test_blob_parameters_check_their_size_and_alignment() -> None:
    with pytest.raises(ValueError, match="128-byte blob parameter was given 127 bytes"):
        TENSOR_MAP.encode(bytes(127))
    with pytest.raises(ValueError, match="power-of-two"):
        BlobParam(128, 48)
    with pytest.raises(ValueError, match="no kernel parameter type"):
        ScalarParam("f16")
    with pytest.raises(ValueError, match="unknown kernel parameter type"):
        param_type("u16")


def test_abi_params_round_trip_through_json() -> None:
    params = [AbiParam("A_ptr", POINTER, "A", "ptr"),
              AbiParam("A_stride1", I32_PARAM, "A", "stride", 1),
              AbiParam("tmap_A", TENSOR_MAP, "A", "tensor_map")]
    for param in params:
        assert AbiParam.from_json(param.to_json()) == param
    assert params[2].to_json()["kind"] == "b8[128] align 64"
    with pytest.raises(ValueError, match="wrong type"):
        AbiParam.from_json({**params[0].to_json(), "dim": True})


def _compiled(**options):
    return load_file(SAMPLES / "matmul.py")["matmul"].compile(**options).kernel


def test_a_kernels_parameters_are_typed_by_role() -> None:
    abi = kernel_abi(_compiled())
    roles = {p.role: p.type for p in abi}
    assert roles == {"ptr": POINTER, "stride": I32_PARAM, "symbol": I32_PARAM}
    assert [p.name for p in abi][:3] == ["A_ptr", "A_stride0", "A_stride1"]


def test_split_k_adds_typed_workspace_pointers_last() -> None:
    abi = kernel_abi(_compiled(split_k=2))
    assert [(p.name, p.type, p.role) for p in abi[-2:]] == [
        ("split_partials", POINTER, "workspace"), ("split_counters", POINTER, "workspace")]
