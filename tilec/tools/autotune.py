"""Autotuning: pick the fastest schedule of a tile program for the arguments at hand.

A configuration is a dict of the knobs the passes expose: the block tile as the program's
constants (``BM``, ``BN``, ``BK``), and the options ``warps`` (None: tiling chooses),
``stages``, ``swizzle`` ("auto"/"off") and ``raster_group``::

    space = search_space(BM=(64, 128), BN=(128, 256), BK=(32,), stages=(3, 4))
    best = autotune(matmul, (a, b, c), space)    # {"BM": 128, "BN": 128, ...}
    matmul(a, b, c, **best)

Configurations the tiling pass would refuse (shared memory over the target's limit, too
many registers, warps that do not divide the block, BK not a multiple of the mma k) are
pruned with tiling's own checks before anything compiles. The rest are compiled, timed
(CUDA events: the median of several launches after a warm-up), the few within a few percent
of the fastest timed again in turns (FINALISTS), and the best is stored in
the :class:`~tilec.caching.disk.DiskCache`, keyed by the program, the arguments' shape class, the
dtype, the target and the space searched; the next call with the same key times nothing.
"""
from __future__ import annotations

import itertools
import math
import statistics
import sys
from typing import Any, Callable, Iterable, Optional, Sequence

from tilec.caching.disk import DiskCache, from_json_value, stable_hash
from tilec.errors import TileConfigError, TileError
from tilec.ir.core import Block, Kernel, Op
from tilec.kernel import OPTION_NAMES
from tilec.target.layout import SmemLayout
from tilec.options import Options, target_arch
from tilec.passes import tiling

Config = dict[str, Any]
# A timer takes a callable that launches the kernel once and returns milliseconds.
Timer = Callable[[Callable[[], None]], float]

TILE_CONSTANTS = ("BM", "BN", "BK")
KNOBS = TILE_CONSTANTS + ("warps", "stages", "swizzle", "raster_group", "split_k")
# The shape class records each shape symbol rounded up to a power of two (see shape_class).
WARMUP_LAUNCHES = 5
TIMED_LAUNCHES = 25
# The final round: the configurations the sweep timed within FINAL_MARGIN of the best (at
# most FINALISTS of them) are timed again, FINAL_ROUNDS times each, taking turns, and the
# best median wins. One timing a configuration ranks them within the GPU's swings: an H100
# at its power cap clocks down as the sweep heats it, so a configuration timed early looks
# faster (`tilec bench --autotune` at 2048^3 picked a kernel that then ran 0.94x cuBLAS
# against the tuned one's 0.98x, the two 2% apart in the sweep).
FINALISTS = 4
FINAL_MARGIN = 0.05
FINAL_ROUNDS = 3

# tiling._check names the dot's source line in its errors; a pruned configuration has no
# program, so it gets an empty kernel and a dot without a location.
_NO_PROGRAM = Kernel("autotune", [], [], {}, Block())
_NO_DOT = Op("tile.dot", [], [])


class NoFittingConfigError(TileConfigError):
    """Nothing in the space can run: every configuration was pruned or failed to compile
    or to run. ``rejected`` holds each configuration with the reason."""

    def __init__(self, program: str, arch: str, dtype: str,
                 rejected: Sequence[tuple[Config, str]]):
        self.rejected = list(rejected)
        lines = [f"no configuration in the autotune space fits '{program}' on {arch} "
                 f"({dtype}):"]
        lines += [f"  {describe(config)}: {reason}" for config, reason in self.rejected]
        super().__init__("\n".join(lines),
                         hint="add smaller block tiles, fewer stages or other warp grids")


# -- the space ------------------------------------------------------------------------------

def _choices(name: str, value: Any) -> tuple[Any, ...]:
    """A knob's choices: a sequence, or one value standing alone."""
    if name == "warps" and isinstance(value, tuple) and len(value) == 2 \
            and all(isinstance(v, int) for v in value):
        return (value,)  # one warp grid, not two choices
    if isinstance(value, (list, tuple)):
        choices = tuple(tuple(v) if name == "warps" and isinstance(v, list) else v
                        for v in value)
        if not choices:
            raise ValueError(f"search_space: no choices for {name}")
        return choices
    return (value,)


def search_space(BM: Iterable[int] = (64, 128, 256), BN: Iterable[int] = (64, 128, 256),
                 BK: Iterable[int] = (32, 64),
                 warps: Iterable[Optional[tuple[int, int]]] = (None,),
                 stages: Iterable[int] = (2, 3, 4), swizzle: Iterable[str] = ("auto",),
                 raster_group: Iterable[int] = (8,),
                 split_k: Iterable[int] = (1,)) -> list[Config]:
    """Every combination of the knobs' choices, in order, without repeats. The block tile
    keeps the DSL's constant names (``BM``...) because configurations are passed to the
    program as they are. ``warps``: None lets tiling choose, or (warps_m, warps_n).
    ``split_k``: blocks per output tile along K (worth it where the output tiles are too
    few to fill the GPU; left out of the configurations when it is only 1, so they read as
    before split-K existed)."""
    knobs = {"BM": BM, "BN": BN, "BK": BK, "warps": warps, "stages": stages,
             "swizzle": swizzle, "raster_group": raster_group}
    if _choices("split_k", split_k) != (1,):
        knobs["split_k"] = split_k
    axes = [_choices(name, value) for name, value in knobs.items()]
    space: list[Config] = []
    for values in itertools.product(*axes):
        config = dict(zip(knobs, values))
        if config not in space:
            space.append(config)
    return space


def describe(config: Config) -> str:
    """One line: ``BM=128 BN=128 BK=32 warps=auto stages=3 swizzle=auto raster_group=8``."""
    def show(name: str, value: Any) -> str:
        if name == "warps":
            return "auto" if value is None else "x".join(str(v) for v in value)
        return str(value)
    names = [k for k in KNOBS if k in config] + sorted(k for k in config if k not in KNOBS)
    return " ".join(f"{name}={show(name, config[name])}" for name in names)


# -- pruning --------------------------------------------------------------------------------

def config_problem(config: Config, dtype: str, arch: str,
                   fixed: Optional[Config] = None) -> Optional[str]:
    """Why tiling would refuse ``config`` for ``dtype`` tiles on ``arch``, or None;
    ``fixed``: the options given beside the space (f32_math picks the f32 product kind).

    The plan is built as ``tiling.run`` builds it (``tiling.make_plan``) and
    checked by ``tiling._check``, so pruning and compiling can never disagree."""
    option_args = {k: v for k, v in {**(fixed or {}), **config}.items()
                   if k in OPTION_NAMES and k != "arch"}
    try:
        options = Options(**option_args, arch=arch)
    except (TypeError, ValueError) as err:
        return str(err)
    for name in TILE_CONSTANTS:
        value = config.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{name} must be a positive integer, got {value!r}"
    bm, bn, bk = (config[name] for name in TILE_CONSTANTS)
    # The operands' layouts and vectors do not enter the checks; these are placeholders.
    operands = (tiling.OperandPlan("A", "A", SmemLayout(bm, bk), 8),
                tiling.OperandPlan("B", "B", SmemLayout(bk, bn), 8))
    plan = tiling.make_plan((bm, bn, bk), dtype, operands, options)
    try:
        tiling._check(_NO_PROGRAM, _NO_DOT, plan, options)
    except TileConfigError as err:
        return err.message
    return None


def prune(space: Sequence[Config], dtype: str, arch: str,
          fixed: Optional[Config] = None) -> tuple[list[Config], list[tuple[Config, str]]]:
    """Split the space into the configurations tiling accepts and those it refuses, each
    of the latter with the reason (``fixed``: the options given beside the space)."""
    kept: list[Config] = []
    pruned: list[tuple[Config, str]] = []
    for config in space:
        problem = config_problem(config, dtype, arch, fixed)
        if problem is None:
            kept.append(config)
        else:
            pruned.append((config, problem))
    return kept, pruned


# -- keys -----------------------------------------------------------------------------------

def _bucket(size: int) -> int:
    return 0 if size <= 0 else 1 << (size - 1).bit_length()


def shape_class(symbols: dict[str, int], spec: Any) -> dict[str, Any]:
    """What the timings depend on besides the program: each shape symbol rounded up to a
    power of two, and the launch spec (layouts, vector widths, which tile sizes divide the
    symbols), which decides the code the kernel is compiled to."""
    return {"sizes": {name: _bucket(size) for name, size in sorted(symbols.items())},
            "spec": spec}


def tuning_key(program_key: str, shape: dict[str, Any], dtype: str, arch: str,
               space: Sequence[Config], fixed: dict[str, Any], version: str) -> str:
    """The tuning result's key. The space is part of it: the best of another space may not
    be a configuration of this one. ``fixed`` holds the options and constants given beside
    the space, which change what is timed."""
    return stable_hash({"kind": "tuning", "compiler_version": version,
                        "program": program_key, "shape_class": shape, "dtype": dtype,
                        "arch": arch, "space": list(space), "fixed": fixed})


# -- timing ---------------------------------------------------------------------------------

def cuda_event_timer(launch: Callable[[], None], *, warmup: int = WARMUP_LAUNCHES,
                     repeat: int = TIMED_LAUNCHES) -> float:
    """The median milliseconds of ``repeat`` launches, each between two CUDA events, after
    ``warmup`` untimed ones (first-launch costs, clocks ramping up)."""
    from tilec.runtime import driver

    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    stream = getattr(launch, "stream", None)
    for _ in range(warmup):
        launch()
    events = [(driver.Event(), driver.Event()) for _ in range(repeat)]
    for start, end in events:
        start.record(stream)
        launch()
        end.record(stream)
    return statistics.median(driver.Event.elapsed_ms(start, end) for start, end in events)


# -- the tuner ------------------------------------------------------------------------------

def program_dtype(tile_function: Any, consts: dict[str, Any]) -> str:
    """The dtype of the program's mma operands (``f16`` or ``bf16``)."""
    kernel = tile_function.lower(**consts)
    for op in kernel.walk():
        if op.name == "tile.dot":
            return op.operands[0].type.dtype.short
    raise TileConfigError(f"'{kernel.name}' has no `@` to tune")


def _reason(err: Exception) -> str:
    text = err.message if isinstance(err, TileError) else f"{type(err).__name__}: {err}"
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


def _final_round(timed: list[tuple[Config, float]], prepare: Callable[[Config], Any],
                 timer: Timer, name: str, progress: bool) -> list[tuple[Config, float]]:
    """The finalists of the sweep (see FINALISTS), each with the median of its sweep time and
    FINAL_ROUNDS more taken in turns; empty when fewer than two come within FINAL_MARGIN."""
    best_ms = min(ms for _, ms in timed)
    finalists = sorted((item for item in timed if item[1] <= best_ms * (1 + FINAL_MARGIN)),
                       key=lambda item: item[1])[:FINALISTS]
    if len(finalists) < 2:
        return []
    _say(progress, f"autotune {name}: final round, {len(finalists)} configurations within "
                   f"{FINAL_MARGIN:.0%} of the best, {FINAL_ROUNDS} turns each")
    launches = [prepare(config) for config, _ in finalists]
    times = [[ms] for _, ms in finalists]
    for _ in range(FINAL_ROUNDS):
        for launch, seen in zip(launches, times):
            seen.append(float(timer(launch)))
    final = [(config, statistics.median(seen)) for (config, _), seen in zip(finalists, times)]
    for config, ms in final:
        _say(progress, f"autotune {name} final {describe(config)}: {ms:.4f} ms")
    return final


def _say(progress: bool, line: str) -> None:
    if progress:
        print(line, file=sys.stderr, flush=True)


def _check_space(space: Sequence[Config], fixed: dict[str, Any], signature: Any,
                 name: str) -> None:
    """ValueError for a space that names a knob twice or one the program lacks, or a
    program without the block tile's constants."""
    for config in space:
        both = sorted(set(config) & set(fixed))
        if both:
            raise ValueError(f"{', '.join(both)} given both in the space and in kwargs")
        unknown = sorted(k for k in config if k not in OPTION_NAMES | set(signature.consts))
        if unknown:
            raise ValueError(f"'{name}' has no constant or option {', '.join(unknown)} "
                             f"(constants: {', '.join(signature.consts) or 'none'})")
    missing = [c for c in TILE_CONSTANTS if c not in signature.consts]
    if missing:
        raise ValueError(f"autotune needs the block tile as the constants BM, BN, BK; "
                         f"'{name}' has no {', '.join(missing)}")


def _cached_best(cache: DiskCache, key: str, kept: Sequence[Config], name: str,
                 progress: bool) -> Optional[Config]:
    """The stored best configuration for ``key``, if it is one of ``kept``; else None (a
    stored result that is not usable is tuned again)."""
    stored = cache.get_tuning(key)
    if stored is None:
        return None
    try:
        best = from_json_value(stored.get("best"))
    except (TypeError, ValueError):
        return None
    if best not in kept:
        return None
    stored_ms = stored.get("time_ms")
    shown = f"{stored_ms:.4f}" if isinstance(stored_ms, (int, float)) else "?"
    _say(progress, f"autotune {name}: cached best {describe(best)} ({shown} ms)")
    return dict(best)


def _time_each(kept: Sequence[Config], prepare: Callable[[Config], Any], timer: Timer,
               name: str, progress: bool
               ) -> tuple[list[tuple[Config, float]], list[tuple[Config, str]]]:
    """Each configuration prepared and timed once: those timed, and those that failed (a
    compile error, a refused launch, a timer's nonsense) with why."""
    from tilec.runtime.driver import CudaError
    timed: list[tuple[Config, float]] = []
    failed: list[tuple[Config, str]] = []
    for done, config in enumerate(kept, 1):
        head = f"autotune {name} [{done}/{len(kept)}] {describe(config)}"
        try:
            launch = prepare(config)
            ms = float(timer(launch))
            if not math.isfinite(ms) or ms <= 0:
                raise ValueError(f"the timer returned {ms!r} ms")
        except (TileError, ValueError, CudaError) as err:
            failed.append((config, _reason(err)))
            _say(progress, f"{head}: failed: {_reason(err)}")
            continue
        timed.append((config, ms))
        _say(progress, f"{head}: {ms:.4f} ms")
    return timed, failed


def autotune(tile_function: Any, args: Sequence[Any], space: Sequence[Config],
             timer: Optional[Timer] = None, progress: bool = True, *,
             kwargs: Optional[dict[str, Any]] = None, arch: Optional[str] = None,
             cache: Optional[DiskCache] = None) -> Config:
    """The fastest configuration of ``space`` for ``tile_function`` on ``args``.

    ``args`` are the positional launch arguments (GPU arrays, as for ``prepare``);
    ``kwargs`` holds keyword arguments, options and constants shared by every
    configuration. ``timer(launch) -> ms`` defaults to :func:`cuda_event_timer`; ``arch``
    to the current device's; ``cache`` to ``DiskCache()``. ``progress`` writes a line per
    configuration to stderr. Raises :class:`NoFittingConfigError` when nothing fits.
    """
    from tilec.launch.binding import bind_arguments, spec_for

    if not space:
        raise ValueError("the autotune space is empty")
    signature = tile_function.signature
    name = tile_function.name
    kwargs = dict(kwargs or {})
    param_names = {p.name for p in signature.params}
    fixed = {k: v for k, v in kwargs.items() if k not in param_names}
    given_arch = fixed.pop("arch", None)
    if arch is not None and given_arch is not None and arch != given_arch:
        raise ValueError(f"arch={arch!r} and kwargs arch={given_arch!r} disagree")
    arch = arch or given_arch
    if arch is None:
        from tilec.runtime import current_device
        arch = target_arch(current_device().compute_capability)
    _check_space(space, fixed, signature, name)
    # A knob the space leaves out is the one given beside it, else the program's default.
    tile_defaults = {c: fixed.get(c, signature.consts[c]) for c in TILE_CONSTANTS}
    space = [{**{c: v for c, v in tile_defaults.items() if c not in config}, **config}
             for config in space]
    shared = {k: v for k, v in fixed.items() if k not in TILE_CONSTANTS}

    bound = bind_arguments(signature.params, signature.symbols, args,
                           {k: v for k, v in kwargs.items() if k in param_names})
    consts = {k: v for k, v in fixed.items() if k not in OPTION_NAMES}
    dtype = program_dtype(tile_function, consts)
    kept, pruned = prune(space, dtype, arch, shared)
    if not kept:
        raise NoFittingConfigError(name, arch, dtype, pruned)

    cache = cache if cache is not None else DiskCache()
    # The program's key is the compile cache's (sha256 of its file, name and source).
    key = tuning_key(tile_function._key, shape_class(bound.symbols, spec_for(bound)), dtype,
                     arch, space, shared, cache.version)
    cached = _cached_best(cache, key, kept, name, progress)
    if cached is not None:
        return cached

    _say(progress, f"autotune {name} on {arch}: timing {len(kept)} configurations "
                   f"({len(pruned)} pruned)")
    timer = timer or cuda_event_timer
    call_kwargs = {k: v for k, v in kwargs.items() if k != "arch"}

    def prepare(config: Config) -> Any:
        return tile_function.prepare(*args, **{**call_kwargs, **config, "arch": arch})

    timed, failed = _time_each(kept, prepare, timer, name, progress)
    if not timed:
        raise NoFittingConfigError(name, arch, dtype, pruned + failed)

    final = _final_round(timed, prepare, timer, name, progress)
    best, best_ms = min(final or timed, key=lambda item: item[1])
    cache.put_tuning(key, {
        "program": name, "arch": arch, "dtype": dtype, "best": best, "time_ms": best_ms,
        "timed": [{"config": c, "time_ms": ms} for c, ms in timed],
        "final": [{"config": c, "time_ms": ms} for c, ms in final],
        "failed": [{"config": c, "reason": r} for c, r in failed],
        "pruned": [{"config": c, "reason": r} for c, r in pruned]})
    _say(progress, f"autotune {name}: best {describe(best)} ({best_ms:.4f} ms)")
    return dict(best)
