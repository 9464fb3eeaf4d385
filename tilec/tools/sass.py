"""The SASS stage: the PTX assembled by ptxas and disassembled by cuobjdump or nvdisasm.

These are CUDA toolkit programs, not Python packages; where they are missing, the stage is
absent and :func:`sass_unavailable_reason` says why.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

DISASSEMBLERS = (("cuobjdump", ["--dump-sass"]), ("nvdisasm", ["--print-line-info"]))


def _tools() -> tuple[Optional[str], Optional[tuple[str, list[str]]]]:
    ptxas = shutil.which("ptxas")
    for name, flags in DISASSEMBLERS:
        path = shutil.which(name)
        if path:
            return ptxas, (path, flags)
    return ptxas, None


def sass_unavailable_reason() -> Optional[str]:
    ptxas, disassembler = _tools()
    if ptxas is None:
        return "ptxas is not on PATH"
    if disassembler is None:
        return "neither cuobjdump nor nvdisasm is on PATH"
    return None


def sass(ptx: str, arch: str) -> str:
    """SASS for the PTX on ``arch`` (sm_80, sm_86, sm_90). Raises RuntimeError when a tool
    is missing or fails, with its message."""
    reason = sass_unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"no SASS: {reason}")
    ptxas, (disassembler, flags) = _tools()
    with tempfile.TemporaryDirectory(prefix="tilec-sass-") as folder:
        source, cubin = Path(folder) / "kernel.ptx", Path(folder) / "kernel.cubin"
        source.write_text(ptx)
        _run([ptxas, f"-arch={arch}", "-lineinfo", str(source), "-o", str(cubin)])
        return _run([disassembler, *flags, str(cubin)])


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(command[0]).name} failed ({done.returncode}): "
                           f"{done.stderr.strip() or done.stdout.strip()}")
    return done.stdout
