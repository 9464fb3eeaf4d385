"""The SASS stage: present exactly when the toolkit's disassembler is."""
from __future__ import annotations

from pathlib import Path

import pytest

from tilec.kernel import load_file
from tilec.tools.sass import sass, sass_unavailable_reason

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def test_sass_stage_follows_the_tools():
    stages = load_file(SAMPLES / "matmul.py")["matmul"].asm(arch="sm_90")
    if sass_unavailable_reason() is None:
        assert "HMMA" in stages["sass"] and "LDSM" in stages["sass"]
    else:
        assert "sass" not in stages
        with pytest.raises(RuntimeError, match="no SASS"):
            sass(stages["ptx"], "sm_90")


def test_sass_can_be_skipped():
    assert "sass" not in load_file(SAMPLES / "matmul.py")["matmul"].asm(sass=False)
