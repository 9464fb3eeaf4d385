"""Source to PTX: frontend, pass pipeline, backend, with every stage kept as text.

``compile_kernel`` is the one path every entry point (decorator, CLI, benchmarks) uses; its
result is cached in memory by (program, constants, options, pass list), so a repeated call
compiles nothing. The pass list is part of every key (:func:`pipeline_identity`): a pass
registered with ``tilec.register_pass`` after a compile, or one whose code changed, always
reaches the PTX.
"""
from __future__ import annotations

import functools
import hashlib
import os
import time
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from tilec.backend.ptx import Rendered, render
from tilec.families.catalogue import op_definitions
from tilec.ir.core import Kernel, find_grid
from tilec.ir.printer import print_kernel
from tilec.ir.verifier import verify
from tilec.options import Options
from tilec.pipeline import Pass, pipeline, run_pipeline
from tilec.version import COMPILER_VERSION


@dataclass
class Compiled:
    """One kernel compiled for one set of options: the PTX, the launch facts, and the text
    of every stage (``asm["tile"]``, ``asm["<pass>"]``, ``asm["ptx"]``)."""

    name: str
    options: Options
    kernel: Kernel  # the IR after the last pass
    rendered: Rendered
    asm: dict[str, str] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    loaded: Any = None  # (module, function) once loaded on the GPU

    @property
    def ptx(self) -> str:
        return self.rendered.ptx


def metadata_for(compiled: Compiled) -> dict[str, Any]:
    """The metadata ``DiskCache.put`` wants, taken from a compile result. Beside the launch
    facts it keeps the grid's ``raster_group`` attribute, which decides whether the launch
    folds the grid into one axis (``launch.launch_grid``), so a hit needs no IR to launch."""
    grid = find_grid(compiled.kernel)
    raster_group = int(grid.attrs.get("raster_group") or 0) if grid is not None else 0
    rendered = compiled.rendered
    return {"name": compiled.name, "entry": rendered.entry, "threads": rendered.threads,
            "smem_bytes": rendered.smem_bytes, "abi": list(rendered.abi),
            "options": compiled.options, "grid_raster_group": raster_group}


_CACHE: dict[tuple, Compiled] = {}
# The stages a compile keeps without keep_ir: the backends' own texts (LLVM IR as emitted
# and after LLVM's pipeline, then PTX).
LLVM_STAGES = ("llvm", "llvm-opt")
BACKEND_STAGES = (*LLVM_STAGES, "ptx")


def _has_pass_stages(compiled: Compiled) -> bool:
    """Whether a cached compile kept the IR of every stage (it was asked for with keep_ir),
    not only the backend's texts."""
    return any(stage not in BACKEND_STAGES for stage in compiled.asm)


def _render_llvm(kernel: Kernel, options: Options):
    # Imported here: llvmlite loads only for a compile that asks for the llvm backend.
    from tilec.backend import llvm
    return llvm.render(kernel, options)


def _check_llvm_options(options: Options) -> None:
    from tilec.backend import llvm
    llvm.check_options(options)


# Options.backend -> its render(kernel, options).
BACKENDS = {"ptx": render, "llvm": _render_llvm}
# Options.backend -> what it refuses from the options alone, checked before the passes run:
# their errors would speak of what the options ask for (a warp-specialized schedule) where
# the backend cannot emit it at all.
OPTION_CHECKS = {"ptx": lambda options: None, "llvm": _check_llvm_options}


def backend_identity(options: Options) -> str:
    """What besides the options names a backend's output: LLVM's and llvmlite's versions
    for the llvm backend; nothing for ours (the compiler fingerprint covers it)."""
    if options.backend == "ptx":
        return ""
    from tilec.backend.llvm import target
    return target.version()


def cache_key(source_key: str, consts: dict[str, Any], options: Options,
              passes: str = "") -> tuple:
    """The in-memory cache's key; ``passes`` is the pass list's :func:`pipeline_identity`."""
    return (COMPILER_VERSION, source_key, tuple(sorted(consts.items())), options, passes)


def pass_identity(p: Pass) -> Optional[str]:
    """What names one pass's behaviour: its name, its function's module and qualified name,
    and a hash of its code (nested functions' code included). None when that cannot say
    what the pass does: a callable that is not a plain function, or a closure (its captured
    values decide what it does, and may change without its code changing)."""
    run = p.run
    code = getattr(run, "__code__", None)
    if code is None or getattr(run, "__closure__", None):
        return None
    return (f"{p.name}|{getattr(run, '__module__', '')}|{getattr(run, '__qualname__', '')}|"
            f"{_code_digest(code)}|{','.join(p.requires)}")


@functools.lru_cache(maxsize=None)
def _code_digest(code: Any) -> str:
    """:func:`_hash_code` of one code object, once: every compile, cache hits included, names
    the pass list, and walking the passes' code took a third of a millisecond."""
    digest = hashlib.sha256()
    _hash_code(code, digest)
    return digest.hexdigest()


def _hash_code(code: Any, digest: Any) -> None:
    """Feed what a code object does into ``digest``: bytecode, names and constants, nested
    code objects recursively. Not ``marshal.dumps``, whose output depends on reference
    counts, nor line numbers and file names, which moving a function does not change what
    it does; the same in every process and under every hash seed."""
    for part in (code.co_code, code.co_names, code.co_varnames, code.co_freevars,
                 code.co_cellvars, code.co_argcount, code.co_kwonlyargcount, code.co_flags):
        digest.update(repr(part).encode("utf-8") + b"\0")
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _hash_code(const, digest)
        else:
            digest.update(_const_text(const).encode("utf-8") + b"\0")


def _const_text(value: Any) -> str:
    """A constant's text, independent of the hash seed (frozensets of strings iterate in a
    seed's order)."""
    if isinstance(value, frozenset):
        return "frozenset(" + ",".join(sorted(_const_text(v) for v in value)) + ")"
    if isinstance(value, tuple):
        return "(" + ",".join(_const_text(v) for v in value) + ")"
    return f"{type(value).__name__}:{value!r}"


def pipeline_identity(passes: Sequence[Pass]) -> Optional[str]:
    """The identity of a pass list, in order (a sha256 over :func:`pass_identity`), or None
    when a pass has none: such a list is never cached, so its passes always run."""
    return _pipeline_identity(tuple(passes))


@functools.lru_cache(maxsize=64)  # every compile asks, cache hits included
def _pipeline_identity(passes: tuple[Pass, ...]) -> Optional[str]:
    identities = [pass_identity(p) for p in passes]
    if any(identity is None for identity in identities):
        return None
    return hashlib.sha256("\n".join(identities).encode("utf-8")).hexdigest()


def compile_kernel(kernel: Kernel, options: Options, *, source_key: Optional[str] = None,
                   passes: Optional[Sequence[Pass]] = None, keep_ir: bool = False) -> Compiled:
    """Run the pipeline and the PTX backend on a lowered kernel.

    With a ``source_key`` and the default passes (those registered included), the PTX is
    also kept in the on-disk cache (:mod:`tilec.caching.disk`; ``TILEC_CACHE_DIR``,
    ``TILEC_DISK_CACHE=0`` turns it off): a later process takes it from there instead of
    running the backend. The passes still run, since launching reads their IR (the grid, the
    parameter list). Both caches are keyed by the pass list's identity, and a pipeline
    with a pass that has none (:func:`pass_identity`) is not cached."""
    key = None
    dump_dir = os.environ.get("TILEC_DUMP_DIR")
    identity = None
    if source_key is not None and passes is None:
        passes = pipeline()  # the list the key names is the list that runs
        identity = pipeline_identity(passes)
    if identity is not None:
        key = cache_key(source_key, kernel.consts, options, identity)
        hit = _CACHE.get(key)
        if hit is not None and (not keep_ir or _has_pass_stages(hit)) and not dump_dir:
            return hit
    keep_ir = keep_ir or bool(dump_dir)
    OPTION_CHECKS[options.backend](options)
    if options.verify:
        verify(kernel, after="frontend", ops=op_definitions())
    result = run_pipeline(kernel, options, passes, keep_ir=keep_ir)
    start = time.perf_counter()
    disk = disk_cache() if key is not None else None
    # The llvm backend's PTX is keyed on LLVM's version too; a disk hit has no LLVM IR, so a
    # compile asked for its stages (keep_ir) runs LLVM again.
    disk_key = (disk.key_for(source_key, kernel.consts, options, identity,
                             backend=backend_identity(options))
                if disk is not None else None)
    entry = (disk.get(disk_key) if disk is not None
             and not (keep_ir and options.backend != "ptx") else None)
    rendered = entry.rendered() if entry is not None else BACKENDS[options.backend](
        result.kernel, options)
    times = dict(result.times, backend=time.perf_counter() - start)
    asm = dict(result.stages)
    if getattr(rendered, "llvm", None) is not None:
        asm["llvm"] = rendered.llvm
        asm["llvm-opt"] = rendered.llvm_opt
        times["llvm"] = rendered.seconds
        rendered = Rendered(rendered.ptx, rendered.entry, rendered.threads,
                            rendered.smem_bytes, rendered.abi)
    asm["ptx"] = rendered.ptx
    compiled = Compiled(kernel.name, options, result.kernel, rendered, asm, times)
    if disk is not None and entry is None:
        disk.put(disk_key, rendered.ptx, metadata_for(compiled))
    if dump_dir:
        dump_stages(compiled, dump_dir)
    if key is not None:
        _CACHE[key] = compiled
    return compiled


_DISK_CACHES: dict[str, Any] = {}


def disk_cache():
    """The on-disk cache for the current ``TILEC_CACHE_DIR`` (None when
    ``TILEC_DISK_CACHE=0``). Its version is the compiler version plus a hash of the
    compiler's own source, so a changed pass or backend never reads an older PTX."""
    if os.environ.get("TILEC_DISK_CACHE", "1") == "0":
        return None
    from tilec.caching.disk import DiskCache, default_cache_dir
    directory = str(default_cache_dir())
    cache = _DISK_CACHES.get(directory)
    if cache is None:
        cache = DiskCache(directory, version=f"{COMPILER_VERSION}+{compiler_fingerprint()}")
        _DISK_CACHES[directory] = cache
    return cache


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of every source file of the compiler: everything under tilec/ (frontend, IR,
    the pipeline, this module...), passes/, backend/ and grammar/."""
    # Folders, not the packages: the tilec package is found from this file, which sits at its
    # top, so this module never imports its own package's __init__ (which imports it).
    import tilec.backend
    import tilec.grammar
    import tilec.passes
    own_folder = os.path.dirname(os.path.abspath(__file__))
    subpackages = (tilec.passes, tilec.backend, tilec.grammar)
    # Each subpackage's own folder is the first on its path.
    folders = [own_folder] + [list(package.__path__)[0] for package in subpackages]
    digest = hashlib.sha256()
    for folder in folders:
        # os.walk, not Path.rglob: this runs on every cold start that consults the disk
        # cache, and rglob took twice as long (it lists __pycache__ too).
        files = []
        for root, dirs, names in os.walk(folder):
            dirs[:] = [name for name in dirs if name != "__pycache__"]
            parts = Path(os.path.relpath(root, folder)).parts
            files += [(*parts, name) for name in names if name.endswith((".py", ".lark"))]
        for parts in sorted(files):  # the order of the relative paths' parts
            relative = os.path.join(*parts)
            with open(os.path.join(folder, relative), "rb") as file:
                digest.update(relative.encode() + b"\0" + file.read())
    return digest.hexdigest()[:16]


def dump_stages(compiled: Compiled, directory: str) -> Path:
    """Write every stage's text to ``directory/<kernel>-<options hash>/NN-<stage>.txt``."""
    tag = hashlib.sha256(repr(compiled.options).encode()).hexdigest()[:10]
    folder = Path(directory) / f"{compiled.name}-{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    for index, (stage, text) in enumerate(compiled.asm.items()):
        suffix = "ptx" if stage == "ptx" else "ll" if stage in LLVM_STAGES else "ir"
        (folder / f"{index:02d}-{stage}.{suffix}").write_text(text)
    (folder / "options.txt").write_text(repr(compiled.options) + "\n")
    return folder


def source_key(text: str, filename: str, name: str) -> str:
    return hashlib.sha256(f"{filename}\0{name}\0{text}".encode()).hexdigest()


def ir_text(kernel: Kernel) -> str:
    return print_kernel(kernel)
