"""The one launch function (tilec.runtime.driver.launch) on the CPU: a fake driver module
records what it is handed, and the test reads the kernelParams array back."""
from __future__ import annotations

import ctypes
import struct
import threading
from types import SimpleNamespace

import pytest

from tilec.backend.abi import F32_PARAM, POINTER, TENSOR_MAP
from tilec.runtime import driver
from tilec.runtime.driver import (BlobArg, F32Arg, Function, I32Arg, I64Arg, PtrArg,
                                  kernel_argument, launch)

bindings = pytest.importorskip("cuda.bindings.driver")


class FakeDriver(SimpleNamespace):
    """The launch calls, recording their arguments; structs from cuda.bindings itself."""

    def __init__(self) -> None:
        super().__init__(calls=[], CUlaunchConfig=bindings.CUlaunchConfig,
                         CUlaunchAttribute=bindings.CUlaunchAttribute,
                         CUlaunchAttributeID=bindings.CUlaunchAttributeID,
                         CUstream=bindings.CUstream)

    def cuLaunchKernel(self, *args):
        self.calls.append(("cuLaunchKernel", args))
        return (0,)

    def cuLaunchKernelEx(self, *args):
        self.calls.append(("cuLaunchKernelEx", args))
        return (0,)

    def cuOccupancyMaxActiveClusters(self, *args):
        self.calls.append(("cuOccupancyMaxActiveClusters", args))
        return (0, 30)


def fake_function() -> Function:
    """A Function as loading a module makes it, without a driver."""
    function = Function.__new__(Function)
    function.name, function.handle = "k", "handle"
    function._device = SimpleNamespace(make_current=lambda: None)
    function._max_threads, function._dynamic_shared_limit = 1024, 48 * 1024
    function._marshallers, function.lock = {}, threading.Lock()
    function._resident_clusters = {}
    return function


@pytest.fixture
def fake(monkeypatch) -> FakeDriver:
    fake = FakeDriver()
    monkeypatch.setattr(driver, "_cuda", fake)
    return fake


ARGS = [PtrArg(0x1122_3344_5566), I32Arg(-7), BlobArg(bytes(range(128))), F32Arg(2.5),
        I64Arg(-(2**40))]
EXPECTED = [struct.pack("<Q", 0x1122_3344_5566), struct.pack("<i", -7), bytes(range(128)),
            struct.pack("<f", 2.5), struct.pack("<q", -(2**40))]


def params_at(address: int) -> list[tuple[int, bytes]]:
    """(address, bytes) of each parameter the kernelParams array points at."""
    out = []
    for index, expected in enumerate(EXPECTED):
        pointer = ctypes.c_void_p.from_address(address + 8 * index).value
        out.append((pointer, ctypes.string_at(pointer, len(expected))))
    return out


def test_a_plain_launch_hands_cuLaunchKernel_each_parameters_bytes(fake) -> None:
    function = fake_function()  # owns the parameter storage read back below
    launch(function, (4, 2, 1), (128, 1, 1), 1024, None, ARGS)
    [(call, args)] = fake.calls
    assert call == "cuLaunchKernel"
    assert args[0] == "handle" and args[1:8] == (4, 2, 1, 128, 1, 1, 1024)
    assert int(args[8]) == 0 and args[10] == 0  # the legacy stream, no extra
    params = params_at(args[9])
    assert [data for _, data in params] == EXPECTED
    assert params[2][0] % 64 == 0  # the blob sits at its own alignment


@pytest.mark.parametrize("cluster", [(1, 1, 1), (2, 1, 1)])
def test_a_cluster_launch_goes_through_cuLaunchKernelEx(fake, cluster) -> None:
    function = fake_function()
    launch(function, (4, 2, 1), (128, 1, 1), 0, 5, ARGS, cluster=cluster)
    [(call, (config, handle, address, extra))] = fake.calls
    assert (call, handle, extra) == ("cuLaunchKernelEx", "handle", 0)
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (4, 2, 1)
    assert (config.blockDimX, config.blockDimY, config.blockDimZ) == (128, 1, 1)
    assert config.sharedMemBytes == 0 and int(config.hStream) == 5
    [attribute] = config.attrs
    assert config.numAttrs == 1
    assert attribute.id == bindings.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    dims = attribute.value.clusterDim
    assert (dims.x, dims.y, dims.z) == cluster
    assert [data for _, data in params_at(address)] == EXPECTED


def test_resident_clusters_asks_the_driver_once_per_shape(fake) -> None:
    """cuOccupancyMaxActiveClusters with the launch's block, shared memory and cluster shape
    (the cluster attribute is required: the kernels declare no cluster size of their own)."""
    function = fake_function()
    assert function.resident_clusters((384, 1, 1), 200_000, (4, 1, 1)) == 30
    assert function.resident_clusters((384, 1, 1), 200_000, (4, 1, 1)) == 30
    [(call, (handle, config))] = fake.calls
    assert (call, handle) == ("cuOccupancyMaxActiveClusters", "handle")
    assert (config.gridDimX, config.blockDimX, config.sharedMemBytes) == (4, 384, 200_000)
    [attribute] = config.attrs
    dims = attribute.value.clusterDim
    assert (dims.x, dims.y, dims.z) == (4, 1, 1)
    function.resident_clusters((384, 1, 1), 200_000, (2, 1, 1))
    assert len(fake.calls) == 2


def test_one_layout_per_signature_reused_across_launches(fake) -> None:
    function = fake_function()
    launch(function, (1, 1, 1), (32, 1, 1), 0, None, ARGS)
    changed = [PtrArg(1), I32Arg(2), BlobArg(bytes(128)), F32Arg(-1.0), I64Arg(3)]
    launch(function, (1, 1, 1), (32, 1, 1), 0, None, changed)
    (_, first), (_, second) = fake.calls
    assert first[9] == second[9] and len(function._marshallers) == 1
    pointer = ctypes.c_void_p.from_address(second[9] + 8).value
    assert ctypes.c_int32.from_address(pointer).value == 2


@pytest.mark.parametrize("grid, cluster, message", [
    ((3, 1, 1), (2, 1, 1), "dividing the grid"),
    ((4, 1, 1), (0, 1, 1), "dividing the grid"),
])
def test_a_cluster_must_divide_the_grid(fake, grid, cluster, message) -> None:
    with pytest.raises(ValueError, match=message):
        launch(fake_function(), grid, (32, 1, 1), 0, None, [PtrArg(0)], cluster=cluster)
    assert fake.calls == []


def test_untyped_arguments_are_refused_before_the_driver(fake) -> None:
    with pytest.raises(TypeError, match="argument 1 has type int; wrap it as Ptr"):
        launch(fake_function(), (1, 1, 1), (32, 1, 1), 0, None, [PtrArg(0), 3])
    assert fake.calls == []


def test_kernel_argument_wraps_values_by_parameter_type() -> None:
    assert type(kernel_argument(POINTER, 5)) is PtrArg
    assert type(kernel_argument(F32_PARAM, 1)) is F32Arg
    blob = kernel_argument(TENSOR_MAP, bytes(128))
    assert type(blob) is BlobArg and blob.param_type == TENSOR_MAP


def test_a_cluster_the_device_refuses_says_what_clusters_need(monkeypatch) -> None:
    fake = FakeDriver()
    fake.CUresult = bindings.CUresult  # names the code, as the real module does
    refused = int(bindings.CUresult.CUDA_ERROR_INVALID_CLUSTER_SIZE)
    fake.cuLaunchKernelEx = lambda *args: (refused,)
    monkeypatch.setattr(driver, "_cuda", fake)
    function = fake_function()
    function._device.compute_capability = (9, 0)
    with pytest.raises(driver.CudaError) as error:
        launch(function, (16, 1, 1), (384, 1, 1), 4096, None, ARGS, cluster=(16, 1, 1))
    text = str(error.value)
    assert error.value.name == "CUDA_ERROR_INVALID_CLUSTER_SIZE"
    assert text.startswith("cuLaunchKernelEx failed: CUDA_ERROR_INVALID_CLUSTER_SIZE")
    assert "kernel 'k', grid (16, 1, 1), block (384, 1, 1), cluster (16, 1, 1)" in text
    assert "The device refused a cluster of 16 blocks" in text
    assert "compute capability 9.0 or newer (this device has compute capability 9.0)" in text
    assert "more than 8 blocks are not portable" in text
    assert "each with 4096 bytes of dynamic shared memory and 384 threads" in text
