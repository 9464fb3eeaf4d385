"""GPU tier of the runtime: hand-written PTX loaded, launched and checked on a real device."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tilec.runtime import (
    F32Arg,
    I32Arg,
    I64Arg,
    CudaError,
    DeviceBuffer,
    Event,
    HostStaging,
    PtrArg,
    Stream,
    as_array_arg,
    current_device,
    elapsed_ms,
    gpu_unavailable_reason,
    has_gpu,
    launch,
    load_module,
    synchronize,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_gpu(), reason=f"no GPU: {gpu_unavailable_reason()}"),
]

HEADER = """\
.version 8.0
.target sm_80
.address_size 64
"""

# data[i] += value for i < count; one thread per element.
ADD_SCALAR_PTX = HEADER + """
.visible .entry add_scalar(
    .param .u64 data,
    .param .u32 count,
    .param .f32 value
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [data];
    ld.param.u32 %r1, [count];
    ld.param.f32 %f1, [value];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd2, %rd2, %rd3;
    ld.global.f32 %f2, [%rd2];
    add.f32 %f2, %f2, %f1;
    st.global.f32 [%rd2], %f2;
DONE:
    ret;
}

// Writes each parameter to out, 8 bytes apart, so the host can check the packing.
.visible .entry echo_params(
    .param .u64 out,
    .param .s32 a,
    .param .s64 b,
    .param .f32 c,
    .param .u64 d
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    .reg .f32 %f<2>;

    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.s32 %r1, [a];
    st.global.s32 [%rd1], %r1;
    ld.param.s64 %rd2, [b];
    st.global.s64 [%rd1+8], %rd2;
    ld.param.f32 %f1, [c];
    st.global.f32 [%rd1+16], %f1;
    ld.param.u64 %rd3, [d];
    st.global.u64 [%rd1+24], %rd3;
    ret;
}

// Stores a byte at dynamic shared offset `last`, reads it back and writes it to out[0].
.extern .shared .align 16 .b8 dynamic_smem[];
.visible .entry touch_shared(
    .param .u64 out,
    .param .u32 last
)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<2>;
    .reg .b16 %h<3>;

    ld.param.u32 %r1, [last];
    mov.u32 %r2, dynamic_smem;
    add.u32 %r2, %r2, %r1;
    mov.u16 %h1, 42;
    st.shared.u8 [%r2], %h1;
    ld.shared.u8 %h2, [%r2];
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    st.global.u8 [%rd1], %h2;
    ret;
}
"""


@pytest.fixture(scope="module")
def module():
    return load_module(ADD_SCALAR_PTX, name="runtime_test")


def add_scalar(module, pointer: int, count: int, value: float, stream=None) -> None:
    block = 128
    launch(module.function("add_scalar"), ((count + block - 1) // block or 1, 1, 1),
           (block, 1, 1), 0, stream, [PtrArg(pointer), I32Arg(count), F32Arg(value)])


def test_device_properties() -> None:
    device = current_device()
    major, minor = device.compute_capability
    assert device.arch == f"sm_{major}{minor}"
    assert major >= 8
    assert device.multiprocessor_count > 0
    assert device.max_shared_memory_per_block_optin >= 48 * 1024
    assert device.name
    print(f"{device!r}: {device.multiprocessor_count} SMs, "
          f"{device.max_shared_memory_per_block_optin} B opt-in shared memory")


def test_add_scalar_through_device_buffer(module) -> None:
    host = np.arange(1000, dtype=np.float32)
    buffer = DeviceBuffer(host.nbytes)
    buffer.copy_from_host(host)
    add_scalar(module, buffer.ptr, host.size, 1.0)
    result = np.empty_like(host)
    buffer.copy_to_host(result)
    np.testing.assert_array_equal(result, host + 1.0)
    buffer.free()
    assert buffer.ptr == 0


def test_memset_d8(module) -> None:
    buffer = DeviceBuffer(64)
    buffer.memset_d8(0)
    result = np.ones(16, np.float32)
    buffer.copy_to_host(result)
    assert (result == 0).all()


def test_module_keeps_the_jit_info_log() -> None:
    # The driver's JIT cache skips ptxas (and its log) for PTX it has seen: a fresh process
    # with the cache off compiles for sure.
    script = ("import sys; from tilec.runtime import load_module; "
              "print(load_module(sys.stdin.read()).jit_log)")
    completed = subprocess.run([sys.executable, "-c", script], input=ADD_SCALAR_PTX,
                               capture_output=True, text=True, timeout=120,
                               env={**os.environ, "CUDA_CACHE_DISABLE": "1"})
    assert "Used" in completed.stdout and "registers" in completed.stdout, completed.stderr


def test_parameters_arrive_as_packed(module) -> None:
    buffer = DeviceBuffer(32)
    buffer.memset_d8(0)
    launch(
        module.function("echo_params"), (1, 1, 1), (1, 1, 1), 0, None,
        [PtrArg(buffer.ptr), I32Arg(-7), I64Arg(-(2**40) - 3), F32Arg(2.5),
         PtrArg(0xDEAD_BEEF_CAFE)])
    raw = np.zeros(32, np.uint8)
    buffer.copy_to_host(raw)
    assert raw[0:4].view(np.int32)[0] == -7
    assert raw[8:16].view(np.int64)[0] == -(2**40) - 3
    assert raw[16:20].view(np.float32)[0] == 2.5
    assert raw[24:32].view(np.uint64)[0] == 0xDEAD_BEEF_CAFE


def test_function_attributes(module) -> None:
    attributes = module.function("add_scalar").attributes()
    assert attributes["num_regs"] > 0
    assert attributes["static_shared_bytes"] == 0
    assert attributes["local_size_bytes"] == 0
    assert attributes["max_threads_per_block"] >= 128


def test_dynamic_shared_memory_beyond_48_kib(module) -> None:
    device = current_device()
    function = module.function("touch_shared")
    buffer = DeviceBuffer(1)
    big = device.max_shared_memory_per_block_optin
    with pytest.raises(ValueError, match="set_dynamic_shared_memory"):
        launch(function, (1, 1, 1), (1, 1, 1), big, None, [PtrArg(buffer.ptr), I32Arg(big - 1)])
    with pytest.raises(ValueError, match="opt-in limit"):
        function.set_dynamic_shared_memory(big + 1)
    function.set_dynamic_shared_memory(big)
    launch(function, (1, 1, 1), (1, 1, 1), big, None, [PtrArg(buffer.ptr), I32Arg(big - 1)])
    result = np.zeros(1, np.uint8)
    buffer.copy_to_host(result)
    assert result[0] == 42


@pytest.mark.parametrize("grid, block, message", [
    ((0, 1, 1), (32, 1, 1), "grid"),
    ((1, 65536, 1), (32, 1, 1), "grid"),
    ((1, 1, 70000), (32, 1, 1), "grid"),
    ((1, 1, 1), (2048, 1, 1), "block"),
    ((1, 1, 1), (0, 1, 1), "block"),
])
def test_launch_validates_dimensions(module, grid, block, message) -> None:
    with pytest.raises(ValueError, match=message):
        launch(module.function("add_scalar"), grid, block, 0, None,
               [PtrArg(0), I32Arg(0), F32Arg(0.0)])


def test_launch_wants_typed_arguments(module) -> None:
    with pytest.raises(TypeError, match="argument 1 has type int; wrap it as PtrArg, I32Arg"):
        launch(module.function("add_scalar"), (1, 1, 1), (32, 1, 1), 0, None,
               [PtrArg(0), 0, F32Arg(0.0)])


def test_unknown_kernel_name(module) -> None:
    with pytest.raises(CudaError, match="add_scalar"):
        module.function("no_such_kernel")


def test_bad_ptx_error_carries_the_jit_log_and_a_repro() -> None:
    bad = HEADER + ".visible .entry broken()\n{\n    bogus.instruction %r1;\n    ret;\n}\n"
    with pytest.raises(CudaError) as caught:
        load_module(bad, name="broken")
    error = caught.value
    assert error.name == "CUDA_ERROR_INVALID_PTX"
    assert error.call == "cuModuleLoadDataEx"
    assert error.jit_log
    assert error.jit_log.splitlines()[0].strip() in str(error)
    assert "ptxas -arch=sm_80 " in str(error)
    print(error)


def test_host_staging_writes_back_in_place(module) -> None:
    storage = np.arange(64, dtype=np.float32).reshape(8, 8)
    expected = storage.copy()
    expected[:, 2] += 3.0
    column = storage[:, 2]  # strided: staged through a contiguous copy
    arg = as_array_arg(column, "X", "f32", 1)
    with HostStaging() as staging:
        device_arg = staging.to_device(arg, written=True)
        assert device_arg.device == current_device().ordinal
        assert device_arg.strides == (1,)
        add_scalar(module, device_arg.ptr, 8, 3.0)
        staging.copy_back()
    np.testing.assert_array_equal(storage, expected)


def test_host_staging_zero_size(module) -> None:
    arg = as_array_arg(np.zeros((0, 4), np.float32), "X", "f32", 2)
    with HostStaging() as staging:
        device_arg = staging.to_device(arg, written=True)
        assert device_arg.ptr == 0
        staging.copy_back()


def test_streams_and_events(module) -> None:
    count = 1 << 20
    buffer = DeviceBuffer(count * 4)
    buffer.memset_d8(0)
    stream = Stream()
    start, end = Event(), Event()
    start.record(stream)
    for _ in range(10):
        add_scalar(module, buffer.ptr, count, 1.0, stream)
    end.record(stream)
    milliseconds = elapsed_ms(start, end)
    assert milliseconds > 0.0
    stream.synchronize()
    result = np.empty(count, np.float32)
    buffer.copy_to_host(result)
    assert (result == 10.0).all()
    print(f"10 launches over 4 MiB: {milliseconds:.3f} ms")


def test_cached_launch_is_cheap_on_the_host(module) -> None:
    buffer = DeviceBuffer(4 * 128)
    function = module.function("add_scalar")
    args = [PtrArg(buffer.ptr), I32Arg(128), F32Arg(1.0)]
    for _ in range(100):
        launch(function, (1, 1, 1), (128, 1, 1), 0, None, args)
    synchronize()
    rounds = 2000
    began = time.perf_counter()
    for _ in range(rounds):
        launch(function, (1, 1, 1), (128, 1, 1), 0, None, args)
    per_launch_us = (time.perf_counter() - began) / rounds * 1e6
    synchronize()
    print(f"host time per cached launch: {per_launch_us:.2f} us")
    # The target is under 10 us; the bound leaves room for a loaded machine.
    assert per_launch_us < 50.0


def test_kernel_fault_surfaces_at_synchronize() -> None:
    # A fault poisons the context for good, so it runs in its own process.
    script = textwrap.dedent('''
        from tilec.runtime import CudaError, I32Arg, PtrArg, launch, load_module, synchronize
        PTX = """HEADER
        .visible .entry store_to_null(.param .u64 out)
        {
            .reg .b32 %r<2>;
            .reg .b64 %rd<2>;
            ld.param.u64 %rd1, [out];
            mov.u32 %r1, 1;
            st.global.u32 [%rd1], %r1;
            ret;
        }
        """
        function = load_module(PTX).function("store_to_null")
        launch(function, (1, 1, 1), (1, 1, 1), 0, None, [PtrArg(0)])
        try:
            synchronize()
        except CudaError as error:
            print("NAME", error.name)
    ''').replace("HEADER", HEADER)
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=120)
    assert "NAME CUDA_ERROR_ILLEGAL_ADDRESS" in completed.stdout, completed.stderr


def test_torch_zero_copy(module) -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.arange(256, dtype=torch.float32, device="cuda")
    arg = as_array_arg(tensor, "X", "f32", 1)  # through __cuda_array_interface__
    assert arg.ptr == tensor.data_ptr()
    add_scalar(module, arg.ptr, 256, 2.0)
    synchronize()
    assert torch.equal(tensor.cpu(), torch.arange(256, dtype=torch.float32) + 2.0)

    matrix = torch.zeros((64, 32), dtype=torch.bfloat16, device="cuda").t()
    arg = as_array_arg(matrix, "B", "bf16", 2)  # CAI refuses bf16: through DLPack
    assert (arg.ptr, arg.shape, arg.strides) == (matrix.data_ptr(), (32, 64), (1, 32))
    assert arg.device == tensor.device.index


def test_torch_host_tensor_through_dlpack(module) -> None:
    torch = pytest.importorskip("torch")
    tensor = torch.zeros(100, dtype=torch.float32)
    arg = as_array_arg(tensor, "X", "f32", 1)
    assert arg.device is None
    with HostStaging() as staging:
        add_scalar(module, staging.to_device(arg, written=True).ptr, 100, 4.0)
        staging.copy_back()
    assert bool((tensor == 4.0).all())


def test_cupy_zero_copy(module) -> None:
    cupy = pytest.importorskip("cupy")
    array = cupy.zeros((16, 16), dtype=cupy.float32)
    arg = as_array_arg(array, "X", "f32", 2)
    assert arg.ptr == array.data.ptr
    add_scalar(module, arg.ptr, 256, 1.5)
    synchronize()
    assert float(array.sum()) == 1.5 * 256
