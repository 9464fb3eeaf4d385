"""The contenders: tilec (``samples/matmul.py``, its A and B retyped for each dtype),
cuBLAS through the array library, and the Triton kernel. Each says which cases it takes
and what C it writes, and prepares a run per input set."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from tilec.benchmarking.array_libraries import Arrays
from tilec.benchmarking.cases import EXACT_OUTPUT, TILEC_DTYPES, Case
from tilec.benchmarking.triton_kernel import TRITON_CONFIG, triton_matmul
from tilec.families.products import family_of
from tilec.ir.types import ACCUMULATOR_DTYPES, DType
from tilec.launch.waves import Launch, launch_of
from tilec.benchmarking.tuning import (SIXTEEN_BIT, TILEC_AS,
                                       autotune_space, tuned_config)

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "matmul.py"
# The batched rows' sample: C[b] = A[b] @ B[b] over a grid axis of batches.
BATCHED_SAMPLE = SAMPLE.with_name("bmm.py")

Run = Callable[[int], None]  # runs the product on input set i


class Contender:
    """A matmul implementation: which cases it takes, what C it writes, how it runs."""

    name = ""
    # C_DTYPES: "inputs" writes 16-bit products' C in their dtype, as torch.matmul does;
    # "f32" writes every C as f32 (cuBLAS through torch.matmul still writes 16 bits).
    c_dtype = "inputs"

    def unsupported(self, case: Case) -> Optional[str]:
        return None

    def out_dtype(self, case: Case) -> str:
        if case.dtype in EXACT_OUTPUT:
            return EXACT_OUTPUT[case.dtype]
        return case.dtype if self.c_dtype == "inputs" and case.dtype in SIXTEEN_BIT else "f32"

    def math(self, case: Case) -> str:
        """The dtype whose numerics (and tolerance) the contender's product has: the case's,
        unless it was told to compute f32 otherwise."""
        return case.dtype

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, Any]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        """A function running set i (inputs[i] into outputs[i]), and the config it uses."""
        raise NotImplementedError


class TorchOnlyContender(Contender):
    """A contender that calls torch (or Triton) on the bench's arrays: n/a, saying
    ``needs_torch``, unless they are torch tensors."""

    needs_torch = "it runs on torch tensors"

    def __init__(self, arrays: Arrays) -> None:
        self.arrays = arrays

    def unsupported(self, case: Case) -> Optional[str]:
        return None if self.arrays.name == "torch" else self.needs_torch


# How the config column names the instruction family a row ran on.
PRODUCT_WORDS = {"wgmma": "wgmma+TMA", "wgmma8": "wgmma+TMA 8-bit", "mma": "mma.sync",
                 "simt": "ffma", "tf32": "mma.sync",
                 "int8": "mma.sync .s8", "fp8": "mma.sync .e4m3"}


def describe_compiled(compiled: Any, packing: Any = None,
                      tile_axes: Optional[Sequence[int]] = None,
                      sms: Optional[tuple[int, str]] = None) -> str:
    """``128x128x32 mma.sync warps 2x4 stages 3``: the tiling and instruction family the
    compiler chose, and what the launch
    packs (``packing``: a :class:`tilec.launch.packing.PackPlan`), e.g. ``, A packed to stride
    4096 (rows were 2-byte aligned)``. Given the launch's ``tile_axes``, a warp-specialized
    kernel (whose residency is as compiled) says how its blocks fall into waves on the GPU's
    SMs (``sms``: the count and whose, default the GPU's): ``, 5 waves (the last 12%
    full)``."""
    schedule = compiled.kernel.schedule
    plan = schedule.tiling
    stages = schedule.stages if schedule.pipeline is not None else compiled.options.stages
    text = f"stages {stages}"
    if plan is not None:
        text = (f"{'x'.join(map(str, plan.block))} {PRODUCT_WORDS.get(plan.kind, plan.kind)} "
                f"warps {plan.warps[0]}x{plan.warps[1]} " + text)
    roles = schedule.roles
    if roles is not None and roles.persistent:
        text += " persistent"
    if roles is not None and roles.cluster_blocks > 1:
        text += f" cluster {roles.cluster}" + (f"x{roles.cluster_n}" if roles.cluster_n > 1
                                               else "")
    if roles is not None and roles.pingpong:
        text += " pingpong"
    epilogue = compiled.kernel.schedule.epilogue
    if epilogue is not None and epilogue.via == "tma":
        text += " TMA-store epilogue"
    elif epilogue is not None and epilogue.via == "rows":
        text += " row-store epilogue"
    if compiled.options.swizzle == "off":
        text += " swizzle off"
    if compiled.options.split_k > 1:
        text += f" split-K {compiled.options.split_k}"
    if schedule.roles is not None and schedule.roles.blocks_per_sm > 1:
        text += f" {schedule.roles.blocks_per_sm} blocks/SM"
    if plan is not None and family_of(plan).f32_math == "tf32":
        text += " tf32"
    if packing:
        text += ", " + ", ".join(packing.describe())
    if tile_axes is not None and roles is not None:
        text += ", " + _waves_summary(launch_of(compiled, tile_axes, 0, sms))
    return text


def _waves_summary(launch: Launch) -> str:
    waves = launch.waves
    noun = ("round" if waves.count == 1 else "rounds") + " of tiles" if launch.persistent \
        else ("wave" if waves.count == 1 else "waves")
    if waves.last == waves.per_wave or waves.count == 0:
        return f"{waves.count} full {noun}"
    if waves.count == 1:
        return f"1 {noun}, {waves.last / waves.per_wave:.0%} full"
    return f"{waves.count} {noun} (the last {waves.last / waves.per_wave:.0%} full)"


def sample_kernel(dtype: str, out: str = "f32", batched: bool = False) -> Any:
    """samples/matmul.py's tile function (``batched``: samples/bmm.py's) with A and B read
    as ``dtype``, and C written as ``out`` (the sample's f32, or the accumulator converted:
    ``acc.to(out)``)."""
    from tilec.kernel import load_file
    sample = BATCHED_SAMPLE if batched else SAMPLE
    text = sample.read_text(encoding="utf-8")
    retyped = text.replace("A: f16[", f"A: {dtype}[").replace("B: f16[", f"B: {dtype}[")
    if f"A: {dtype}[" not in retyped or f"B: {dtype}[" not in retyped:
        raise RuntimeError(f"{sample} no longer declares A: f16[...] and B: f16[...]")
    accumulator = ACCUMULATOR_DTYPES[DType.parse(dtype)]
    if str(accumulator) != "f32":  # i8: an i32 accumulator, stored as it is
        retyped = retyped.replace("zeros([BM, BN], f32)", f"zeros([BM, BN], {accumulator})")
        if f"zeros([BM, BN], {accumulator})" not in retyped:
            raise RuntimeError(f"{sample} no longer starts acc as zeros([BM, BN], f32)")
    if out != str(accumulator):
        retyped = retyped.replace("C: f32[", f"C: {out}[").replace("] = acc\n",
                                                                    f"] = acc.to({out})\n")
        if f"acc.to({out})" not in retyped:
            raise RuntimeError(f"{sample} no longer declares C: f32[...] stored as acc")
    elif out != "f32":
        retyped = retyped.replace("C: f32[", f"C: {out}[")
    return load_file(sample, text=retyped)["bmm" if batched else "matmul"]


class TilecContender(Contender):
    name = "tilec"

    def __init__(self, consts: dict[str, Any], options: dict[str, Any], autotune: bool = False,
                 progress: bool = True) -> None:
        self.consts, self.options = dict(consts), dict(options)
        self.autotune, self.progress = autotune, progress
        self._kernels: dict[tuple[str, str, bool], Any] = {}

    def kernel(self, dtype: str, out: str = "f32", batched: bool = False) -> Any:
        if (dtype, out, batched) not in self._kernels:
            self._kernels[dtype, out, batched] = sample_kernel(dtype, out, batched)
        return self._kernels[dtype, out, batched]

    def math(self, case: Case) -> str:
        if case.dtype == "f32" and self.options.get("f32_math") == "tf32":
            return "tf32"  # --f32-math tf32: the f32 rows are tf32 products
        return case.dtype

    def unsupported(self, case: Case) -> Optional[str]:
        return None if case.dtype in TILEC_DTYPES else f"tilec has no {case.dtype} path yet"

    def arch(self) -> str:
        """The target the kernels compile for: the --arch given, else the device's."""
        if "arch" in self.options:
            return self.options["arch"]
        from tilec.options import target_arch
        from tilec.runtime import current_device
        return target_arch(current_device().compute_capability)

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, Any]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        dtype, forced = TILEC_AS.get(case.dtype, (case.dtype, {}))
        kernel = self.kernel(dtype, self.out_dtype(case), case.batched)
        # Knobs given on the command line win; the tuned defaults fill in the rest, as long
        # as the command line fixes no tile size (a half-tuned tile would not fit). What the
        # dtype means (tf32: f32_math="tf32") wins over both.
        fixed = {**self.consts, **self.options, **forced}
        # The f16/bf16 and 8-bit rows depend on the target (wgmma on sm_90a), and every
        # row's ring on its shared memory.
        arch = self.arch()
        backend = self.options.get("backend", "ptx")
        tuned = {} if self.autotune or self.consts else tuned_config(
            case, arch, backend, self.options.get("fp8_accumulation", "fast"))
        kwargs = {**tuned, **fixed}
        if self.autotune:
            from tilec.tools.autotune import autotune
            best = autotune(kernel, (*inputs[0], outputs[0]),
                            autotune_space(case, kwargs, arch, backend),
                            kwargs=kwargs, progress=self.progress)
            kwargs.update(best)
        launches = [kernel.prepare(a, b, c, **kwargs) for (a, b), c in zip(inputs, outputs)]
        first = launches[0]
        peel = getattr(first, "peel", None)  # a PeeledLaunch's cut (Options.peel)
        return (lambda i: launches[i]()), (describe_compiled(first.compiled, first.packing,
                                                             first.tile_axes)
                                           + (f", {peel.summary()}" if peel else "")
                                           + f", C {self.out_dtype(case)}")


class LlvmTilecContender(TilecContender):
    """The same kernels as the tilec contender, compiled by the llvm backend (``tilec bench
    --backend llvm``), for a column of its own. The same configurations but on sm_90a, where
    the llvm backend emits no wgmma: its 16- and 8-bit rows run the mma.sync families in
    their tuned configurations (:func:`tuned_config` with the backend), beside the tilec
    column's wgmma; the config column names each."""

    name = "tilec-llvm"


class VariantTilecContender(TilecContender):
    """tilec with compile flags of its own over the command line's (``tilec bench --variant
    NAME=FLAGS``): a column ``tilec[NAME]`` timed in the same run, on the same inputs and
    with the same timer as the tilec column, so that one knob's effect is measured against
    no other drift (the H100's clocks and power swing more between runs than the effect of
    most knobs)."""

    def __init__(self, label: str, consts: dict[str, Any], options: dict[str, Any]) -> None:
        super().__init__(consts, options)
        self.name = f"tilec[{label}]"


class CublasContender(Contender):
    name = "cuBLAS"

    def __init__(self, arrays: Arrays, fp8_accumulation: str = "fast") -> None:
        self.arrays = arrays
        # cuBLAS sums fp8 products as tilec is told to (Options.fp8_accumulation): fast
        # (use_fast_accum=True) or promoted into f32 (False), so both compute alike.
        self.fast_accumulation = fp8_accumulation == "fast"

    def out_dtype(self, case: Case) -> str:
        return "f32" if case.dtype == "tf32" else EXACT_OUTPUT.get(case.dtype, case.dtype)

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, Any]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        tf32 = case.dtype == "tf32"

        fast = self.fast_accumulation

        def run(i: int) -> None:
            self.arrays.matmul(*inputs[i], outputs[i], tf32=tf32, fast_accumulation=fast)
        note = {"f32": ", TF32 off", "tf32": ", TF32 on", "i8": ", B k contiguous",
                "f8e4m3": f", B k contiguous, unit scales, use_fast_accum={fast}"}.get(
            case.dtype, "")
        # 8-bit products go through torch's own GEMMs (TorchArrays.matmul).
        # torch.matmul (cupy.matmul) of 3-D arrays is torch.bmm's batched product.
        call = "bmm" if case.batched and self.arrays.name == "torch" else "matmul"
        function = {"i8": "torch._int_mm", "f8e4m3": "torch._scaled_mm"}.get(
            case.dtype, f"{self.arrays.name}.{call}")
        return run, f"{function}, C {self.out_dtype(case)}{note}"


class TritonContender(TorchOnlyContender):
    name = "Triton"
    needs_torch = "the Triton kernel runs on torch tensors"

    def unsupported(self, case: Case) -> Optional[str]:
        if case.batched:
            return "the Triton kernel is a 2-D matmul (no batched rows)"
        if case.dtype not in TRITON_CONFIG:
            return f"the Triton kernel has no {case.dtype} configuration"
        return super().unsupported(case)

    def prepare(self, case: Case, inputs: Sequence[tuple[Any, Any]],
                outputs: Sequence[Any]) -> tuple[Run, str]:
        config = TRITON_CONFIG[case.dtype]
        ieee = case.dtype == "f32"  # tf32: Triton's default f32 dot, TF32

        def run(i: int) -> None:
            triton_matmul(*inputs[i], outputs[i], config, ieee=ieee)
        bm, bn, bk, stages, warps = config
        precision = {"f32": ", ieee f32 dot", "tf32": ", tf32 dot"}.get(case.dtype, "")
        return run, (f"{bm}x{bn}x{bk} warps {warps} stages {stages}{precision}, "
                     f"C {self.out_dtype(case)}")
