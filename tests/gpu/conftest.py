"""Fixtures the GPU tests share."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def hopper():
    """Skips what asks for it unless the GPU is compute capability 9.0 (H100, H200): sm_90a
    code (wgmma, TMA, setmaxnreg) runs only there."""
    from tilec.runtime import current_device
    capability = current_device().compute_capability
    if capability != (9, 0):
        pytest.skip(f"sm_90a needs compute capability 9.0, this GPU has "
                    f"{capability[0]}.{capability[1]}")
