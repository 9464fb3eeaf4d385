"""Whether code compiled for a target can run on the device at hand, asked before any module
is loaded: the driver's own answer for a mismatch is a JIT error (CUDA_ERROR_NO_BINARY_FOR_GPU,
or ptxas refusing an instruction) that names neither the target nor the device.
"""
from __future__ import annotations

from tilec.options import ARCHS, arch_capability, target_arch


def _capability(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def check_runs_on(arch: str, capability: tuple[int, int], device: str = "this GPU") -> None:
    """ValueError when code compiled for ``arch`` cannot run on a device of compute
    ``capability`` (``device`` names it in the message). An architecture-specific target
    (``sm_90a``: wgmma, setmaxnreg, TMA tensor maps) runs only on exactly its own capability;
    any other target on its capability or newer (the driver JIT-compiles its PTX forward).
    Unknown targets pass: the compile options refuse them with the list of known ones."""
    if arch not in ARCHS:
        return
    needed = arch_capability(arch)
    if arch.endswith("a"):
        if tuple(capability) == needed:
            return
        rule = (f"whose architecture-specific instructions run only on compute capability "
                f"{_capability(needed)} exactly")
        wanted = _capability(needed)
    else:
        if tuple(capability) >= needed:
            return
        rule = f"which needs compute capability {_capability(needed)} or newer"
        wanted = f"{_capability(needed)} or newer"
    try:
        fix = (f"compile for arch=\"{target_arch(tuple(capability))}\" (what a call without "
               f"arch picks for this device), or ")
    except ValueError:  # a device older than every target: there is nothing to suggest
        fix = ""
    raise ValueError(f"the kernel was compiled for {arch}, {rule}, but {device} has compute "
                     f"capability {_capability(capability)}: {fix}run it on a compute "
                     f"capability {wanted} GPU")
