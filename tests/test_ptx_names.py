"""Issue 12, class 2: user names reach the PTX only as identifiers ptxas accepts and no two
alike. Non-ASCII names, a kernel called ``_`` or like a module-scope name, a scalar called like a
generated parameter (``A_ptr``, ``A_stride0``, ``dim_M``, ``split_partials``), and a source path
with ``"`` or non-ASCII characters all assemble; the launch still passes each value to its own
parameter."""
from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from tilec.backend.abi import printable, ptx_identifier
from tilec.backend.signature import kernel_abi
from tests.test_ptxas import assert_assembles
from tilec.kernel import load_file
from tilec.launch.binding import Bound, kernel_arguments

PTXAS = shutil.which("ptxas")

TEXT = """from __future__ import annotations
from tilec import f16, f32, tile


@tile
def _(A: f16[M, K], B: f16[K, N], C: f32[M, N], A_ptr: f32, dim_M: f32, A_stride0: f32,
      split_partials: f32, BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc * A_ptr + dim_M * A_stride0 + split_partials


@tile
def matmul_é(Aé: f16[Mé, K], B: f16[K, N], C: f32[Mé, N], WARP_SZ: f32, BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(Mé, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += Aé[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc * WARP_SZ


@tile
def tilec_smem(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ B[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
"""
PATH = 'dir "quoted" é/kernels\n.py'
FUNCTIONS = load_file(PATH, text=TEXT)


def test_valid_free_names_stay_and_the_rest_are_mangled_deterministically():
    assert ptx_identifier("A_ptr") == "A_ptr"
    assert ptx_identifier("A_ptr", {"A_ptr"}) == "A_ptr$0"
    assert ptx_identifier("A_ptr", {"A_ptr", "A_ptr$0"}) == "A_ptr$1"
    assert ptx_identifier("_") == "_$0"
    assert ptx_identifier("WARP_SZ") == "WARP_SZ$0"
    assert ptx_identifier("matmul_é") == "matmul_$ue9$0"
    assert printable('a "b" é\n') == "a \\x22b\\x22 \\xe9\\x0a"
    assert printable('a "b"\té', comment=True) == 'a "b"\t\\xe9'


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("split_k", [1, 2])
def test_parameter_names_are_distinct_ptx_identifiers(name, split_k):
    compiled = FUNCTIONS[name].compile(split_k=split_k) if split_k > 1 else \
        FUNCTIONS[name].compile()
    names = [p.name for p in kernel_abi(compiled.kernel)]
    assert len(set(names)) == len(names)
    assert all(n.isascii() and n != "_" and n != "WARP_SZ" for n in names)
    ptx = compiled.ptx
    assert ptx.isascii()
    assert f".entry {compiled.rendered.entry}(" in ptx
    assert compiled.rendered.entry not in ("_", "tilec_smem")


@pytest.mark.skipif(PTXAS is None, reason="ptxas is not on PATH")
@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("split_k", [1, 2])
def test_ptxas_accepts_user_names(tmp_path, name, split_k):
    options = {"split_k": split_k} if split_k > 1 else {}
    # Annotated PTX quotes each source line (non-ASCII here) in a comment.
    assert_assembles(lambda arch: FUNCTIONS[name].ptx(arch=arch, annotate=arch == "sm_90",
                                                      **options), tmp_path)


def test_a_scalar_named_like_a_generated_parameter_gets_its_own_value():
    compiled = FUNCTIONS["_"].compile(split_k=2)
    abi = kernel_abi(compiled.kernel)
    device = {"A": SimpleNamespace(ptr=0xA000, strides=(7, 1)),
              "B": SimpleNamespace(ptr=0xB000, strides=(9, 1)),
              "C": SimpleNamespace(ptr=0xC000, strides=(9, 1)),
              "$split_partials": SimpleNamespace(ptr=0xD000),
              "$split_counters": SimpleNamespace(ptr=0xE000)}
    scalars = {"A_ptr": 1.5, "dim_M": 2.5, "A_stride0": 3.5, "split_partials": 4.5}
    bound = Bound(device, scalars, {"M": 11, "N": 9, "K": 7})
    values = dict(zip([p.name for p in abi], kernel_arguments(compiled.kernel, bound, device)))
    assert len(values) == len(abi)
    # The first of two alike keeps the name: tensor A's pointer and stride come before the
    # scalars, the scalars before the shape symbols and the split-K workspace.
    assert (values["A_ptr"], values["A_stride0"]) == (0xA000, 7)
    assert (values["A_ptr$0"], values["A_stride0$0"]) == (1.5, 3.5)
    assert (values["dim_M"], values["dim_M$0"]) == (2.5, 11)
    assert (values["split_partials"], values["split_partials$0"]) == (4.5, 0xD000)


def test_a_tensor_named_like_the_workspace_is_not_taken_for_it():
    """The split-K workspace travels under keys no parameter can have, so a tensor called
    split_partials keeps its own buffer."""
    function = load_file("names.tile", text=TENSOR_NAMED_LIKE_THE_WORKSPACE)["k"]
    compiled = function.compile(split_k=2)
    abi = kernel_abi(compiled.kernel)
    device = {"A": SimpleNamespace(ptr=0xA000, strides=(7, 1)),
              "split_partials": SimpleNamespace(ptr=0xB000, strides=(9, 1)),
              "C": SimpleNamespace(ptr=0xC000, strides=(9, 1)),
              "$split_partials": SimpleNamespace(ptr=0xD000),
              "$split_counters": SimpleNamespace(ptr=0xE000)}
    bound = Bound(device, {}, {"M": 11, "N": 9, "K": 7})
    values = dict(zip([p.name for p in abi], kernel_arguments(compiled.kernel, bound, device)))
    assert values["split_partials_ptr"] == 0xB000
    assert values["split_partials"] == 0xD000 and values["split_counters"] == 0xE000


TENSOR_NAMED_LIKE_THE_WORKSPACE = """\
@tile
def k(A: f16[M, K], split_partials: f16[K, N], C: f32[M, N], BM=64, BN=64, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m * BM : +BM, k : +BK] @ split_partials[k : +BK, n * BN : +BN]
        C[m * BM : +BM, n * BN : +BN] = acc
"""
