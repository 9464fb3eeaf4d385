"""The ``@tile`` decorator and the kernel object users hold.

``@tile`` parses the function's source with the DSL grammar (it never runs it), and returns
a :class:`TileFunction`: call it on arrays to run it (on the GPU, or in the CPU interpreter
when there is none), or ask it for any stage of the compilation without running anything.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from tilec import frontend
from tilec.compiler import Compiled, compile_kernel, source_key
from tilec.ir.core import Kernel
from tilec.ir.views import view_source
from tilec.launch.arch_check import check_runs_on
from tilec.launch.binding import (bind_arguments, bind_names, check_outputs, check_size,
                                  divisibility, grid_size, kernel_arguments, launch_cluster,
                                  launch_grid, spec_for)
from tilec.options import Options, Spec, target_arch
from tilec.pipeline import Pass

if TYPE_CHECKING:
    from tilec.launch.packing import PackPlan

# Operand packing and the split-K workspace (tilec.launch.packing, .split_workspace) are
# imported by the launches that use them: compiling never does, and a cold `tilec compile`
# should not wait for them.

# Keyword arguments of compile/ptx that are options, not the program's constants.
OPTION_NAMES = {f.name for f in dataclasses.fields(Options)} - {"spec"}


class TileFunction:
    def __init__(self, func_ast, text: str, filename: str, source_lines: Sequence[str]):
        self.ast = func_ast
        self.name = func_ast.name
        self.filename = filename
        self.source_lines = tuple(source_lines)
        self._key = source_key(text, filename, self.name)
        self.signature = frontend.signature(func_ast)
        self._interpreter_warned = False
        self._lowered: dict[tuple, Kernel] = {}

    def __repr__(self) -> str:
        return f"<tile function {self.name} from {self.filename}>"

    # -- compiling ----------------------------------------------------------------------
    def lower(self, **consts: Any) -> Kernel:
        """The tile IR the frontend makes, before any pass (kept per set of constants: passes
        never modify their input, so a call does not lower again)."""
        key = tuple(sorted(consts.items()))
        kernel = self._lowered.get(key)
        if kernel is None:
            kernel = frontend.lower(self.ast, consts, source_lines=self.source_lines)
            self._lowered[key] = kernel
        return kernel

    def _split(self, kwargs: dict[str, Any]) -> tuple[dict, dict, dict]:
        options, consts, shapes = {}, {}, {}
        symbols = set(self.signature.symbols)
        for name, value in kwargs.items():
            if name in OPTION_NAMES:
                is_sequence = isinstance(value, (list, tuple))
                options[name] = tuple(value) if name in ("warps", "disable") and is_sequence \
                    else value
            elif name in symbols:
                shapes[name] = check_size(name, value)
            else:
                consts[name] = value
        return options, consts, shapes

    def compile(self, *, spec: Optional[Spec] = None, passes: Optional[Sequence[Pass]] = None,
                keep_ir: bool = False, **kwargs: Any) -> Compiled:
        """Compile for the given options (``arch``, ``stages``, ``warps``, ``swizzle``,
        ``disable``...), constants (``BM=64``) and shape symbols (``M=4096``: lets the
        compiler drop edge masks where the sizes divide the tiles)."""
        option_args, consts, shapes = self._split(kwargs)
        if spec is None and shapes:
            spec = Spec(divisible=divisibility(shapes))
        options = Options(**option_args, spec=spec or Spec())
        kernel = self.lower(**consts)
        return compile_kernel(kernel, options, source_key=self._key, passes=passes,
                              keep_ir=keep_ir)

    def ptx(self, **kwargs: Any) -> str:
        return self.compile(**kwargs).ptx

    def asm(self, *, sass: bool = True, **kwargs: Any) -> dict[str, str]:
        """Every stage's text: the tile IR, the IR after each pass, the PTX, and the SASS
        when ptxas and cuobjdump or nvdisasm are on PATH (``sass=False`` skips it)."""
        compiled = self.compile(keep_ir=True, **kwargs)
        stages = dict(compiled.asm)
        if sass:
            from tilec.tools.sass import sass as disassemble, sass_unavailable_reason
            if sass_unavailable_reason() is None:
                stages["sass"] = disassemble(compiled.ptx, compiled.options.arch)
        return stages

    # -- running ------------------------------------------------------------------------
    def __call__(self, *args: Any, device: str = "auto", **kwargs: Any):
        """Run on the arguments; returns the written tensors' arrays (the last one alone
        when there is one). ``device``: "gpu", "cpu" (the interpreter) or "auto"."""
        params = {p.name for p in self.signature.params}
        call_kwargs = {k: v for k, v in kwargs.items() if k in params}
        compile_kwargs = {k: v for k, v in kwargs.items() if k not in params}
        if device not in ("auto", "gpu", "cpu"):
            raise ValueError(f"device must be 'auto', 'gpu' or 'cpu', got {device!r}")
        # One binding for both paths: extra, doubled, unknown and missing arguments.
        values = bind_names(self.signature.params, args, call_kwargs)
        from tilec.runtime.driver import gpu_unavailable_reason, has_gpu
        use_gpu = device == "gpu" or (device == "auto" and has_gpu())
        if not use_gpu:
            if device == "auto" and not self._interpreter_warned:
                # The reason `tilec run` gives too: a missing cuda-python reads differently
                # from a driver that failed to load, and each has its own fix.
                warnings.warn(f"no GPU ({gpu_unavailable_reason()}): running in tilec's CPU "
                              "interpreter", RuntimeWarning, stacklevel=2)
                self._interpreter_warned = True
            return self._run_interpreter(values, compile_kwargs)
        return self._run_gpu(values, compile_kwargs)

    def _outputs(self, written: list[str], values: dict[str, Any]):
        outs = [values[name] for name in written]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run_interpreter(self, values, compile_kwargs):
        """Check what the GPU path checks, then interpret: the options are compiled for the
        default target (stages, warps, shared memory over the limit fail as they would on
        the GPU), the interpreter refuses the arrays the GPU binding refuses, and runs with
        the options that change numerics (``f32_math``)."""
        from tilec.cpu.interpreter import run_kernel
        option_args, consts, _ = self._split(compile_kwargs)
        kernel = self.lower(**consts)
        options = Options(**option_args)
        compile_kernel(kernel, options, source_key=self._key)
        run_kernel(kernel, values, f32_math=options.f32_math)
        return self._outputs(written_params(kernel), values)

    def prepare(self, *args: Any, stream=None, **kwargs: Any) -> "PreparedLaunch":
        """Bind GPU arrays once and return a callable that only launches: the cheapest way
        to run the same kernel on the same buffers again (benchmarks, graphs). Under
        ``peel=True`` it may be a :class:`PeeledLaunch` of two."""
        from tilec.runtime import current_device
        params = {p.name for p in self.signature.params}
        call_kwargs = {k: v for k, v in kwargs.items() if k in params}
        option_args, consts, _ = self._split({k: v for k, v in kwargs.items()
                                              if k not in params})
        bound = bind_arguments(self.signature.params, self.signature.symbols, args,
                               call_kwargs)
        kernel = self.lower(**consts)
        check_outputs(bound, written_params(kernel))
        host = [name for name, arg in bound.tensors.items() if arg.device is None]
        if host:
            raise TypeError(f"prepare() takes GPU arrays; argument(s) {', '.join(host)} are "
                            "host arrays")
        option_args.setdefault("arch", target_arch(current_device().compute_capability))
        check_device_runs(option_args["arch"])
        return self._launch_on(kernel, bound, option_args, consts, stream)

    def _launch_on(self, kernel: Kernel, bound, option_args: dict[str, Any],
                   consts: dict[str, Any], stream):
        """The prepared launch of ``kernel`` (lowered with ``consts``) on device arguments,
        peeled in two under peel=True where that gains something."""
        peel = self._peel(kernel, bound, option_args)
        if peel is None:
            return self._prepared(kernel, bound, option_args, stream)
        from tilec.launch.peeling import peeled_bounds, remainder_settings
        main, rest = peeled_bounds(kernel, bound, peel)
        rest_options, rest_consts = remainder_settings(peel, option_args, consts)
        return PeeledLaunch(peel, self._prepared(kernel, main, option_args, stream),
                            self._prepared(self.lower(**rest_consts), rest, rest_options,
                                           stream))

    def _peel(self, kernel: Kernel, bound, option_args: dict[str, Any]):
        """The launch's peeled parts (tilec.launch.peeling) under peel=True, or None to
        launch it whole: peeling would gain nothing at these sizes. A program that cannot
        be peeled is refused, saying why."""
        if not option_args.get("peel"):
            return None
        from tilec.errors import TileConfigError
        from tilec.launch.peeling import peel_sites, plan_peel
        sites, why = peel_sites(kernel)
        if not sites:
            raise TileConfigError(f"peel=True: kernel '{kernel.name}' cannot be peeled: {why}")
        return plan_peel(sites, bound.symbols)

    def _prepared(self, kernel: Kernel, bound, option_args: dict[str, Any],
                  stream) -> "PreparedLaunch":
        sizes, packing, compiled = self.compile_for_arguments(kernel, bound, option_args)
        return PreparedLaunch(compiled, bound, sizes, stream, packing)

    def compile_for_arguments(self, kernel: Kernel, bound, option_args: dict[str, Any]):
        """What :meth:`prepare` compiles for ``bound`` (arguments already bound, their
        layouts specializing the kernel) and launches: the tile axes' sizes, the packing
        plan, and the compiled kernel. Needs no GPU: arguments described by ArrayArgs
        compile as their arrays would (tests of the tuned kernels use it so)."""
        from tilec.launch.packing import PackPlan, plan_packing
        sizes = grid_size(kernel, bound.symbols)
        options = Options(**{**option_args, "peel": False}, spec=spec_for(bound))
        packing = PackPlan() if 0 in sizes else plan_packing(
            kernel, bound.tensors, options.pack, written_params(kernel), options.arch,
            options.backend, options.cluster, options)
        compiled = compile_kernel(kernel, packing.options(options), source_key=self._key)
        return sizes, packing, compiled

    def _run_gpu(self, values, compile_kwargs):
        option_args, consts, _ = self._split(compile_kwargs)
        kernel = self.lower(**consts)
        # A peeled launch is two prepared ones (over views of the staged arguments).
        prepared = ((lambda bound, options: self._launch_on(kernel, bound, options, consts,
                                                            None))
                    if option_args.get("peel") else None)
        written = run_on_gpu(kernel, values, option_args, source_key=self._key,
                             prepared=prepared)
        return self._outputs(written, values)


@functools.lru_cache(maxsize=256)
def written_params(kernel: Kernel) -> list[str]:
    sources = (view_source(kernel, op.operands[0]) for op in kernel.walk()
               if op.name == "tile.store")
    stored = {source.name for source in sources if source is not None}
    return [p.name for p in kernel.params if p.name in stored]


def run_on_gpu(kernel: Kernel, values: dict[str, Any], option_args: dict[str, Any],
               source_key: Optional[str] = None,
               prepared: Optional[Callable[[Any, dict[str, Any]], Any]] = None) -> list[str]:
    """Check the arguments, compile for their layout, launch, and copy host outputs back.
    Returns the names of the parameters the kernel writes. ``prepared``: makes the launch
    from the staged arguments (a Bound) and the options instead (a peeled launch's two)."""
    from tilec.launch.packing import Packer, plan_packing, pooled_scratch
    from tilec.launch.plans import keep_plan, kept_plan, plan_key
    from tilec.launch.split_workspace import shared_workspace, workspace_size
    from tilec.runtime import HostStaging, current_device
    bound = bind_arguments(kernel.params, kernel.symbols, [], values)
    check_outputs(bound, written_params(kernel))
    option_args = dict(option_args)
    option_args.setdefault("arch", target_arch(current_device().compute_capability))
    check_device_runs(option_args["arch"])  # before staging copies or any module load
    written = written_params(kernel)
    sizes = grid_size(kernel, bound.symbols)
    with HostStaging() as staging:
        device_args = {name: staging.to_device(arg, written=name in written)
                       for name, arg in bound.tensors.items()}
        if prepared is not None:
            prepared(_with(bound, device_args), option_args)()
        elif 0 not in sizes:
            key = plan_key(kernel, option_args, device_args, bound.symbols, source_key)
            plan = kept_plan(key)
            if plan is None:
                options = Options(**option_args, spec=spec_for(_with(bound, device_args)))
                packing = plan_packing(kernel, device_args, options.pack, written,
                                       options.arch, options.backend, options.cluster,
                                       options)
                compiled = compile_kernel(kernel, packing.options(options),
                                          source_key=source_key)
                keep_plan(key, (packing, compiled))
            else:
                packing, compiled = plan
            # Pooled scratch may go back once the launches are queued: see ScratchPool.
            with pooled_scratch(packing) as scratch:
                packer = Packer(packing, device_args, compiled.options.arch, scratch,
                                compiled.options.backend)
                packer.launch()
                size = workspace_size(compiled.kernel, sizes)
                hidden = shared_workspace(size).args if size else {}
                launch_compiled(compiled, packing.bound(bound), {**packer.args, **hidden},
                                sizes)
        staging.copy_back()
    return written


def _with(bound, device_args):
    from tilec.launch.binding import Bound
    return Bound(device_args, bound.scalars, bound.symbols)


def check_device_runs(arch: str) -> None:
    """ValueError when the current device cannot run code compiled for ``arch`` (an sm_90a
    kernel on anything but compute capability 9.0, say), naming both."""
    from tilec.runtime import current_device
    device = current_device()
    check_runs_on(arch, device.compute_capability, f"device {device.ordinal} ({device.name})")


def _launch_grid(sizes: list[int], compiled: Compiled, function) -> tuple[int, int, int]:
    """The CUDA grid; a persistent kernel's depends on the current device's SM count, and
    in clusters on how many of them the device holds at once (``function``'s occupancy)."""
    kernel = compiled.kernel
    roles = kernel.schedule.roles
    if roles is None or not roles.persistent:
        return launch_grid(sizes, kernel)
    from tilec.runtime import current_device
    cluster = launch_cluster(kernel)
    resident = None if cluster is None else function.resident_clusters(
        (compiled.rendered.threads, 1, 1), compiled.rendered.smem_bytes, cluster)
    return launch_grid(sizes, kernel, current_device().multiprocessor_count, resident)


def loaded_function(compiled: Compiled):
    """The driver function for a compiled kernel, loaded once and kept on it."""
    from tilec.runtime import load_module
    if compiled.loaded is None:
        # Every launch path loads through here; plain calls and prepare() check earlier still,
        # before their operand-pack kernels load.
        check_device_runs(compiled.options.arch)
        module = load_module(compiled.ptx, name=compiled.name)
        function = module.function(compiled.rendered.entry)
        if compiled.rendered.smem_bytes > 48 * 1024:
            function.set_dynamic_shared_memory(compiled.rendered.smem_bytes)
        compiled.loaded = (module, function)
    return compiled.loaded[1]


def launch_compiled(compiled: Compiled, bound, device_args, sizes, stream=None):
    from tilec.runtime import launch
    function = loaded_function(compiled)
    grid = _launch_grid(sizes, compiled, function)
    args = kernel_arguments(compiled.kernel, bound, device_args)
    launch(function, grid, (compiled.rendered.threads, 1, 1), compiled.rendered.smem_bytes,
           stream, args, launch_cluster(compiled.kernel))


class PreparedLaunch:
    """A compiled kernel with its argument list packed: calling it only launches. When
    ``packing`` names operand tensors, their pack kernels go first, on the same stream,
    into scratch that lives as long as this object; a split-K kernel's workspace lives as
    long, too. Calls on one prepared launch are ordered by its stream."""

    def __init__(self, compiled: Compiled, bound, sizes, stream,
                 packing: Optional[PackPlan] = None):
        from tilec.launch.packing import PackPlan, Packer, owned_scratch
        from tilec.launch.split_workspace import Workspace, workspace_size
        packing = PackPlan() if packing is None else packing
        self.compiled = compiled
        self.function = loaded_function(compiled)
        self.tile_axes = tuple(sizes)  # the program's grid (tilec.launch.waves reads it)
        self.grid = _launch_grid(sizes, compiled, self.function)
        self.empty = 0 in sizes
        self.block = (compiled.rendered.threads, 1, 1)
        self.packing = packing
        self.packer = Packer(packing, bound.tensors, compiled.options.arch,
                             owned_scratch(packing), compiled.options.backend)
        size = None if self.empty else workspace_size(compiled.kernel, sizes)
        # Owned, not shared: this launch may run on its own stream beside others.
        self.workspace = Workspace(size) if size else None
        hidden = self.workspace.args if self.workspace else {}
        self.args = kernel_arguments(compiled.kernel, packing.bound(bound),
                                     {**self.packer.args, **hidden})
        self.stream = stream
        self.smem_bytes = compiled.rendered.smem_bytes
        self.cluster = launch_cluster(compiled.kernel)
        from tilec.runtime import launch
        self._launch = launch  # looked up once: this call is the whole cost of a launch

    def __call__(self) -> None:
        if not self.empty:
            self.packer.launch(self.stream)
            self._launch(self.function, self.grid, self.block, self.smem_bytes, self.stream,
                         self.args, self.cluster)


class PeeledLaunch:
    """A launch run as two (Options.peel): the whole tiles' prepared launch, then the
    remainder's, on the same stream. Reads as the whole tiles' launch (``compiled``,
    ``packing``, ``tile_axes``); ``peel`` says where it was cut, ``rest`` is the
    remainder's launch."""

    def __init__(self, peel, main: PreparedLaunch, rest: PreparedLaunch):
        self.peel = peel
        self.main = main
        self.rest = rest
        self.compiled = main.compiled
        self.packing = main.packing
        self.tile_axes = main.tile_axes
        self.stream = main.stream

    def __call__(self) -> None:
        self.main()
        self.rest()


def tile(fn=None):
    """Decorator: parse a function as a tile program (its body is never executed)."""
    def wrap(func) -> TileFunction:
        text, filename, first_line, col_offset, lines = frontend.function_source(func)
        func_ast = frontend.parse_function(text, filename, first_line, col_offset,
                                           source_lines=lines)
        return TileFunction(func_ast, text, filename, lines)
    return wrap(fn) if fn is not None else wrap




def load_file(path: str | Path, text: Optional[str] = None) -> dict[str, TileFunction]:
    """The tile functions of a ``.py`` or ``.tile`` file by name, in file order, parsed and
    never imported or run. ``text`` stands for the file's content (a benchmark's edited copy
    of a sample); locations and error messages still name ``path``."""
    from tilec.errors import TileError, TileNameError, located

    path = Path(path)
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise TileError(f"cannot read '{path}': {err}") from None
    if path.suffix == ".tile":
        functions = list(frontend.parse_module(text, str(path)).functions)
    elif path.suffix == ".py":
        functions = frontend.source.tile_functions_in_python(text, str(path))
    else:
        raise TileError(f"'{path}' is neither a .tile nor a .py file")
    loaded: dict[str, TileFunction] = {}
    for func_ast in functions:
        if func_ast.name in loaded:
            first = loaded[func_ast.name].ast.loc.line
            raise located(TileNameError, f"tile function '{func_ast.name}' is defined twice "
                          f"(first on line {first})", func_ast.loc, func_ast.source_lines)
        loaded[func_ast.name] = TileFunction(func_ast, text, str(path), func_ast.source_lines)
    return loaded
