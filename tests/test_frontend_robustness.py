"""Regression tests for issue 12's frontend bug classes: integer constants outside i32
(class 3), error locations past the end of the file (class 5) and a .py file without
`from __future__ import annotations` (class 10)."""
import warnings
from pathlib import Path

import pytest

from tilec.errors import TileError
from tilec.frontend import source
from tilec.kernel import load_file

MATMUL = (Path(__file__).resolve().parents[1] / "samples" / "matmul.py").read_text()


def _lower_all(path: str, text: str) -> None:
    for function in load_file(path, text).values():
        function.lower()


def _assert_located(err: TileError, text: str) -> None:
    """The error names a place inside the file and quotes that line with a caret."""
    lines = text.split("\n")
    assert err.loc is not None
    assert 1 <= err.loc.line <= len(lines)
    assert 1 <= err.loc.col <= len(lines[err.loc.line - 1]) + 1
    assert err.source_line == lines[err.loc.line - 1] and err.source_line.strip()
    assert "^" in str(err)


# ------------------------------------------------------------ class 3: integers outside i32

@pytest.mark.parametrize("start", ["10**20", "100000000000000000000", "4294967296",
                                   "0x100000000", "2147483648", "65536 * 65536",
                                   "BK * 1073741824", "-2147483647 - 2"])
def test_integer_outside_i32_is_a_compile_error(start):
    text = MATMUL.replace("range(0, K, BK)", f"range({start}, K, BK)")
    with pytest.raises(TileError) as info:
        _lower_all("big.py", text)
    _assert_located(info.value, text)
    assert info.value.loc.line == 11
    if "**" not in start:
        assert "does not fit in i32" in info.value.message


@pytest.mark.parametrize("start", ["2147483647", "-2147483648", "2147483647 - 0"])
def test_integers_at_the_ends_of_i32_still_compile(start):
    _lower_all("edge.py", MATMUL.replace("range(0, K, BK)", f"range({start}, K, BK)"))


def test_out_of_range_constant_parameter_is_refused_at_its_default():
    text = MATMUL.replace("BK=32", "BK=4294967296")
    with pytest.raises(TileError) as info:
        _lower_all("param.py", text)
    _assert_located(info.value, text)
    assert "does not fit in i32" in info.value.message


# ------------------------------------------------------ class 5: locations past the file

TRUNCATED_TILE = [
    "@tile\ndef f(A: f16[M, K]):\n    for m in grid(1):\n        ",
    "@tile\ndef f(A: f16[M, K]):\n    for m in grid(1):\n",
    "@tile\ndef f(A: f16[M, K]):\n    for m in grid(1):\n\n\n   \n",
    "@tile\ndef f(A: f16[M, K]):\n",
    "@tile\ndef f(A: f16[M, K],\n",
    "@tile\ndef f(A: f16[M, K]):\n    x = (1 +\n\n",
]


@pytest.mark.parametrize("text", TRUNCATED_TILE)
def test_errors_at_the_end_of_a_tile_file_point_at_its_last_line(text):
    with pytest.raises(TileError) as info:
        _lower_all("cut.tile", text)
    _assert_located(info.value, text)


def test_every_truncation_of_a_sample_reports_a_real_place():
    start = MATMUL.index("@tile")
    for cut in range(start, len(MATMUL), 7):
        for suffix in (".tile", ".py"):
            text = MATMUL[:cut]
            try:
                _lower_all("cut" + suffix, text)
            except TileError as err:
                _assert_located(err, text)


def test_form_feed_does_not_shift_the_quoted_line():
    # str.splitlines() splits at "\f"; the parser does not, so quoting must not either.
    text = MATMUL.replace("acc = zeros", "acc\f= zeros").replace("C[m * BM", "C[m * BM ?")
    with pytest.raises(TileError) as info:
        _lower_all("ff.tile", text)
    _assert_located(info.value, text)
    assert info.value.source_line.strip().startswith("C[m * BM ?")


def test_null_byte_in_a_py_file_is_located():
    text = MATMUL.replace("acc = zeros", "acc = \0zeros")
    with pytest.raises(TileError) as info:
        _lower_all("nul.py", text)
    assert info.value.loc.line == 10 and info.value.loc.col == 15


def test_python_syntax_error_at_end_of_file_is_located():
    text = MATMUL + "    for x in ("
    with pytest.raises(TileError) as info:
        _lower_all("eof.py", text)
    _assert_located(info.value, text)


# ------------------------------------------ class 10: `from __future__ import annotations`

NO_FUTURE = MATMUL.replace("from __future__ import annotations", "")


@pytest.mark.skipif(source.ANNOTATIONS_DEFERRED, reason="Python 3.14 defers annotations")
def test_py_file_without_future_import_warns_what_to_add(tmp_path):
    path = tmp_path / "nofuture.py"
    path.write_text(NO_FUTURE)
    with pytest.raises(NameError):  # what Python itself does on import
        exec(compile(NO_FUTURE, str(path), "exec"), {})
    with pytest.warns(source.AnnotationWarning) as caught:
        functions = load_file(path)
    assert "matmul" in functions  # tilec itself reads the file fine
    message = str(caught[0].message)
    assert "from __future__ import annotations" in message and "'M'" in message
    assert caught[0].filename == str(path) and caught[0].lineno == 8


@pytest.mark.parametrize("text", [
    MATMUL,
    "M = K = N = None\n" + NO_FUTURE,  # the names exist: importing works
    "from tilec import tile\n\n@tile\ndef f(BM=128):\n    pass\n",  # no annotations
])
def test_importable_py_files_do_not_warn(text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_file("ok.py", text)


# ------------------------------- found by the fuzzer: float constants beyond f32's range

@pytest.mark.parametrize("old, new", [
    ("C[m * BM : +BM, n * BN : +BN] = acc", "C[m * BM : +BM, n * BN : +BN] = acc / 1e40"),
    ("acc = zeros([BM, BN], f32)", "acc = full([BM, BN], 1e39, f32)"),
])
def test_float_constant_beyond_f32_is_a_compile_error(old, new):
    text = MATMUL.replace(old, new)
    with pytest.raises(TileError) as info:
        for function in load_file("huge.py", text).values():
            function.compile()
    _assert_located(info.value, text)
    assert "outside f32's range" in info.value.message


def test_largest_f32_and_inf_literals_still_compile():
    for literal in ("3.4028234663852886e38", "1e400"):
        text = MATMUL.replace("= acc\n", f"= acc * {literal}\n")
        for function in load_file("edge.py", text).values():
            function.compile()
