"""tilec: tile-level matmul programs in Python, compiled to PTX for NVIDIA GPUs.

    from tilec import tile, f16, f32

    @tile
    def matmul(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=128, BN=128, BK=32):
        ...
"""
import os as _os

# In a source checkout run without installing (PYTHONPATH=.), passes/, backend/ and grammar/
# sit beside tilec/: let them resolve as tilec.passes, tilec.backend and tilec.grammar, as an
# install maps them.
_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_ROOT, "passes", "tiling.py")) and _ROOT not in __path__:
    __path__.append(_ROOT)

from tilec.ir.types import BF16 as bf16, F16 as f16, F32 as f32, I8 as i8, I32 as i32  # noqa: F401
from tilec.ir.types import F8E4M3 as f8e4m3, F8E5M2 as f8e5m2  # noqa: F401
from tilec.options import Options, Spec  # noqa: F401
from tilec.version import COMPILER_VERSION

__version__ = COMPILER_VERSION


def __getattr__(name):
    # The decorator and pipeline pull in the frontend and passes; import them on first use
    # so `import tilec` stays cheap for tools that only want the IR or the runtime.
    if name in ("tile", "TileFunction"):
        from tilec import kernel
        return getattr(kernel, name)
    if name == "pipeline":  # the module, callable: tilec.pipeline() is the pass list
        import tilec.pipeline
        return tilec.pipeline
    if name in ("run_pipeline", "Pass", "register_pass"):
        from tilec import pipeline
        return getattr(pipeline, name)
    if name == "compile_kernel":
        from tilec.compiler import compile_kernel
        return compile_kernel
    raise AttributeError(f"module 'tilec' has no attribute {name!r}")
