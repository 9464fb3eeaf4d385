"""A kernel compiled for a target the device cannot run is refused before any module loads:
an architecture-specific target (sm_90a) runs only on its own compute capability, any other on
its capability or newer. On the CPU, with a fake device."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import tilec.runtime
from tilec.kernel import load_file, loaded_function
from tilec.launch.arch_check import check_runs_on

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


@pytest.mark.parametrize("arch, capability", [
    ("sm_90a", (9, 0)), ("sm_90", (9, 0)), ("sm_90", (10, 0)), ("sm_80", (9, 0)),
    ("sm_86", (8, 9)), ("sm_80", (8, 0)), ("sm_75", (7, 5)),  # unknown: Options refuses it
])
def test_targets_the_device_runs_pass(arch, capability):
    check_runs_on(arch, capability)


@pytest.mark.parametrize("capability, suggestion", [
    ((8, 0), 'compile for arch="sm_80"'), ((8, 6), 'compile for arch="sm_86"'),
    ((10, 0), 'compile for arch="sm_90"'), ((12, 0), 'compile for arch="sm_90"'),
])
def test_sm_90a_runs_only_on_compute_capability_9_0(capability, suggestion):
    with pytest.raises(ValueError) as error:
        check_runs_on("sm_90a", capability, "device 0 (NVIDIA Test GPU)")
    text = str(error.value)
    assert text.startswith("the kernel was compiled for sm_90a, whose architecture-specific "
                           "instructions run only on compute capability 9.0 exactly, but "
                           f"device 0 (NVIDIA Test GPU) has compute capability "
                           f"{capability[0]}.{capability[1]}: ")
    assert suggestion in text and text.endswith("run it on a compute capability 9.0 GPU")


def test_a_target_newer_than_the_device_is_refused():
    with pytest.raises(ValueError, match=r"compiled for sm_90, which needs compute capability "
                                         r"9.0 or newer, but this GPU has compute capability "
                                         r"8.6: compile for arch=\"sm_86\""):
        check_runs_on("sm_90", (8, 6))


def test_a_device_older_than_every_target_gets_no_suggestion():
    with pytest.raises(ValueError) as error:
        check_runs_on("sm_80", (7, 5))
    assert "compile for" not in str(error.value)


@pytest.fixture
def ampere(monkeypatch):
    """An A100 as the current device; staging, module loads and launches must not happen."""
    device = SimpleNamespace(compute_capability=(8, 0), ordinal=0, name="NVIDIA A100",
                             make_current=lambda: None)
    monkeypatch.setattr(tilec.runtime, "current_device", lambda: device)

    def forbidden(*args, **kwargs):
        raise AssertionError("reached GPU work past the arch check")

    for name in ("HostStaging", "load_module", "launch", "DeviceBuffer"):
        monkeypatch.setattr(tilec.runtime, name, forbidden)
    return device


MESSAGE = (r"compiled for sm_90a, whose architecture-specific instructions run only on compute "
           r"capability 9.0 exactly, but device 0 \(NVIDIA A100\) has compute capability 8.0")


def test_a_plain_call_is_refused_before_staging(ampere):
    matmul = load_file(SAMPLES / "matmul.py")["matmul"]
    a, b = np.ones((64, 64), np.float16), np.ones((64, 64), np.float16)
    c = np.zeros((64, 64), np.float32)
    with pytest.raises(ValueError, match=MESSAGE):
        matmul(a, b, c, device="gpu", arch="sm_90a", BM=128, BN=128, BK=64)


class GpuArray:
    """Something exposing __cuda_array_interface__ on cuda:0."""

    def __init__(self, shape, typestr="<f2"):
        self.device = SimpleNamespace(index=0)
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (1 << 20, False), "version": 3,
                                         "strides": None}


def test_prepare_is_refused_before_compiling(ampere):
    matmul = load_file(SAMPLES / "matmul.py")["matmul"]
    args = GpuArray((64, 64)), GpuArray((64, 64)), GpuArray((64, 64), "<f4")
    with pytest.raises(ValueError, match=MESSAGE):
        matmul.prepare(*args, arch="sm_90a")


def test_loading_a_compiled_kernel_is_refused_before_the_module_loads(ampere):
    compiled = load_file(SAMPLES / "matmul.py")["matmul"].compile(arch="sm_90a")
    with pytest.raises(ValueError, match=MESSAGE):
        loaded_function(compiled)
    assert compiled.loaded is None
