"""LLVM's NVPTX target through llvmlite: which (cpu, features) each tilec target selects, the
checks made before LLVM is called, the optimisation pipeline and PTX emission.

LLVM aborts the whole process (``LLVM ERROR: Cannot select``), not with a Python exception,
on an instruction the selected cpu lacks; so every target and feature set is checked here
against :data:`LLVM_TARGETS` first, and what a family needs beyond it is refused by
:func:`tilec.backend.llvm.check_supported` before any IR is parsed.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from tilec.errors import TileConfigError

TRIPLE = "nvptx64-nvidia-cuda"
OPT_LEVELS = (0, 1, 2, 3)
# tilec target -> LLVM cpu and features. PTX ISA 8.0 is what the PTX backend writes and what
# every instruction the llvm backend selects needs (cp.async, ldmatrix, mma: 7.0+).
LLVM_TARGETS: dict[str, tuple[str, str]] = {
    "sm_80": ("sm_80", "+ptx80"),
    "sm_86": ("sm_86", "+ptx80"),
    "sm_90": ("sm_90", "+ptx80"),
    "sm_90a": ("sm_90a", "+ptx80"),
}
# PTX ISA versions a family may ask for (ProductFamily.ptx_version) -> the LLVM feature that
# selects it: 8.4 for fp8's mma.sync m16n8k32 .e4m3/.e5m2 (LLVM selects those intrinsics
# only with +ptx84 and sm_89+; the fp8 family itself refuses sm_80 and sm_86).
PTX_FEATURES = {"8.4": "+ptx84"}
INSTALL_HINT = ("install llvmlite from PyPI (pip install 'llvmlite>=0.44'), whose wheels "
                "include LLVM's NVPTX target")


class LlvmUnavailable(TileConfigError):
    """llvmlite, or its NVPTX target, is missing: the message names the fix (a config
    error, so the CLI prints it without a traceback)."""


@dataclass(frozen=True)
class Selection:
    cpu: str
    features: str


def selection(arch: str, features: str | None = None, ptx: str | None = None) -> Selection:
    """The LLVM cpu and features for a tilec target (and the PTX ISA version a family asks
    for); ValueError naming the combinations LLVM is known to select for anything else
    (never handed to LLVM)."""
    if arch not in LLVM_TARGETS:
        raise ValueError(f"the llvm backend has no LLVM target for '{arch}' (it selects "
                         f"{', '.join(LLVM_TARGETS)})")
    cpu, default = LLVM_TARGETS[arch]
    if ptx is not None:
        if ptx not in PTX_FEATURES:
            raise ValueError(f"the llvm backend has no LLVM feature for PTX ISA {ptx} (it "
                             f"selects {', '.join(PTX_FEATURES)} beside the default)")
        default = PTX_FEATURES[ptx]
    if features is not None and features != default:
        raise ValueError(f"the llvm backend selects {cpu} with features '{default}' only; "
                         f"'{features}' could make LLVM abort the process on an instruction "
                         "the cpu lacks")
    return Selection(cpu, default)


def binding() -> Any:
    try:
        import llvmlite.binding as llvm
    except ImportError as err:
        raise LlvmUnavailable(f"the llvm backend needs llvmlite ({err}); "
                              f"{INSTALL_HINT}") from None
    return llvm


@functools.cache
def _target() -> Any:
    llvm = binding()
    # 32-bit shared-memory pointers (%r registers, as the PTX backend writes them); a
    # process-wide LLVM option, set before the first target machine.
    llvm.set_option("", "--nvptx-short-ptr")
    try:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        return llvm.Target.from_triple(TRIPLE)
    except RuntimeError as err:
        raise LlvmUnavailable(f"this llvmlite has no NVPTX target ({err}); "
                              f"{INSTALL_HINT}") from None


@functools.cache
def target_machine(arch: str, opt: int, ptx: str | None = None) -> Any:
    chosen = selection(arch, ptx=ptx)
    return _target().create_target_machine(cpu=chosen.cpu, features=chosen.features, opt=opt,
                                           codemodel="default")


def version() -> str:
    """What the disk cache keys llvm-backend PTX on: LLVM's and llvmlite's versions."""
    llvm = binding()
    import llvmlite
    return "llvm-{}.{}.{}+llvmlite-{}".format(*llvm.llvm_version_info, llvmlite.__version__)


def data_layout(arch: str) -> str:
    return str(target_machine(arch, 3).target_data)


def compile_ir(text: str, arch: str, opt: int, ptx: str | None = None) -> tuple[str, str]:
    """(the IR after LLVM's pipeline at ``opt``, the PTX) of module ``text``, for PTX ISA
    ``ptx`` where a family asks for one above the default; the parser's verifier raises
    RuntimeError for IR it rejects (a backend bug, reported as such)."""
    if opt not in OPT_LEVELS:
        raise ValueError(f"llvm_opt must be one of {OPT_LEVELS}, got {opt!r}")
    llvm = binding()
    tm = target_machine(arch, opt, ptx)
    module = llvm.parse_assembly(text)
    module.verify()
    if opt:
        tuning = llvm.create_pipeline_tuning_options(speed_level=opt)
        builder = llvm.create_pass_builder(tm, tuning)
        builder.getModulePassManager().run(module, builder)
    return str(module), tm.emit_assembly(module)
