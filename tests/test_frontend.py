"""The frontend: grammar, AST, every user-facing error, lowering to IR (golden text), and
finding tile functions in Python functions, .tile files and .py files."""
from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import random
import textwrap
from pathlib import Path
from typing import Any, Optional

import pytest
from lark import Lark, logger as lark_logger

from tilec.errors import (TileError, TileNameError, TileShapeError, TileSyntaxError,
                          TileTypeError)
from tilec.frontend import (ast, function_source, lower, parse_callable, parse_file,
                            parse_function, parse_module, signature, tile_functions_in_file)
from tilec.frontend.parser import _TileIndenter, _grammar_text
from tilec.ir import F16, F32, I32, Kernel, ScalarType, TensorType, print_kernel, verify

SAMPLES = '''\
from tilec import tile, f16, bf16, f32     # import lines are accepted and ignored

@tile
def matmul(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):        # the launch grid, 1 to 3 axes
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m*BM : +BM, k : +BK] @ B[k : +BK, n*BN : +BN]
        C[m*BM : +BM, n*BN : +BN] = acc

@tile
def gemm(A: f16[M, K], B: f16[K, N], C: f16[M, N], bias: f32[N], alpha: f32, beta: f32,
         BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m*BM : +BM, k : +BK] @ B[k : +BK, n*BN : +BN]
        c = C[m*BM : +BM, n*BN : +BN]
        out = relu(alpha * acc + beta * c + bias[n*BN : +BN])
        C[m*BM : +BM, n*BN : +BN] = out.to(f16)

@tile
def matmul_bt(A: f16[M, K], B: f16[N, K], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m*BM : +BM, k : +BK] @ B.T[k : +BK, n*BN : +BN]   # or B[n*BN:+BN, k:+BK].T
        C[m*BM : +BM, n*BN : +BN] = acc
'''

GOLDEN_MATMUL = '''\
kernel @matmul(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f32,[M,N]>, \
%M: i32, %K: i32, %N: i32) consts {BK = 32, BM = 128, BN = 128} {
  %BM = arith.constant {value = 128} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 128} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 : i32, i32
  %acc = tile.full {shape = [128, 128], value = 0.0} : tile<f32,[128,128]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 32} : i32
  %acc.1 = scf.for %2, %K, %BK, %acc {step_const = 32} : tile<f32,[128,128]> \
(%k: i32, %acc.2: tile<f32,[128,128]>) {
    %BM.1 = arith.constant {value = 128} : i32
    %3 = arith.mul %m, %BM.1 : i32
    %4 = tile.load %A, %3, %k {shape = [128, 32]} : tile<f16,[128,32]>
    %BN.1 = arith.constant {value = 128} : i32
    %5 = arith.mul %n, %BN.1 : i32
    %6 = tile.load %B, %k, %5 {shape = [32, 128]} : tile<f16,[32,128]>
    %acc.3 = tile.dot %4, %6, %acc.2 : tile<f32,[128,128]>
    scf.yield %acc.3
  }
  %BM.2 = arith.constant {value = 128} : i32
  %7 = arith.mul %m, %BM.2 : i32
  %BN.2 = arith.constant {value = 128} : i32
  %8 = arith.mul %n, %BN.2 : i32
  tile.store %C, %7, %8, %acc.1
}
'''

GOLDEN_GEMM = '''\
kernel @gemm(%A: tensor<f16,[M,K]>, %B: tensor<f16,[K,N]>, %C: tensor<f16,[M,N]>, \
%bias: tensor<f32,[N]>, %alpha: f32, %beta: f32, %M: i32, %K: i32, %N: i32) \
consts {BK = 32, BM = 128, BN = 128} {
  %BM = arith.constant {value = 128} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 128} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 : i32, i32
  %acc = tile.full {shape = [128, 128], value = 0.0} : tile<f32,[128,128]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 32} : i32
  %acc.1 = scf.for %2, %K, %BK, %acc {step_const = 32} : tile<f32,[128,128]> \
(%k: i32, %acc.2: tile<f32,[128,128]>) {
    %BM.1 = arith.constant {value = 128} : i32
    %3 = arith.mul %m, %BM.1 : i32
    %4 = tile.load %A, %3, %k {shape = [128, 32]} : tile<f16,[128,32]>
    %BN.1 = arith.constant {value = 128} : i32
    %5 = arith.mul %n, %BN.1 : i32
    %6 = tile.load %B, %k, %5 {shape = [32, 128]} : tile<f16,[32,128]>
    %acc.3 = tile.dot %4, %6, %acc.2 : tile<f32,[128,128]>
    scf.yield %acc.3
  }
  %BM.2 = arith.constant {value = 128} : i32
  %7 = arith.mul %m, %BM.2 : i32
  %BN.2 = arith.constant {value = 128} : i32
  %8 = arith.mul %n, %BN.2 : i32
  %c = tile.load %C, %7, %8 {shape = [128, 128]} : tile<f16,[128,128]>
  %9 = tile.splat %alpha {shape = [128, 128]} : tile<f32,[128,128]>
  %10 = tile.mul %9, %acc.1 : tile<f32,[128,128]>
  %11 = tile.splat %beta {shape = [128, 128]} : tile<f32,[128,128]>
  %12 = tile.cast %c {dtype = f32} : tile<f32,[128,128]>
  %13 = tile.mul %11, %12 : tile<f32,[128,128]>
  %14 = tile.add %10, %13 : tile<f32,[128,128]>
  %BN.3 = arith.constant {value = 128} : i32
  %15 = arith.mul %n, %BN.3 : i32
  %16 = tile.load %bias, %15 {shape = [128]} : tile<f32,[128]>
  %17 = tile.broadcast %16 : tile<f32,[128,128]>
  %18 = tile.add %14, %17 : tile<f32,[128,128]>
  %out = tile.relu %18 : tile<f32,[128,128]>
  %19 = tile.cast %out {dtype = f16} : tile<f16,[128,128]>
  %BM.3 = arith.constant {value = 128} : i32
  %20 = arith.mul %m, %BM.3 : i32
  %BN.4 = arith.constant {value = 128} : i32
  %21 = arith.mul %n, %BN.4 : i32
  tile.store %C, %20, %21, %19
}
'''

GOLDEN_MATMUL_BT = '''\
kernel @matmul_bt(%A: tensor<f16,[M,K]>, %B: tensor<f16,[N,K]>, %C: tensor<f32,[M,N]>, \
%M: i32, %K: i32, %N: i32) consts {BK = 32, BM = 128, BN = 128} {
  %BM = arith.constant {value = 128} : i32
  %0 = arith.cdiv %M, %BM : i32
  %BN = arith.constant {value = 128} : i32
  %1 = arith.cdiv %N, %BN : i32
  %m, %n = tile.grid %0, %1 : i32, i32
  %acc = tile.full {shape = [128, 128], value = 0.0} : tile<f32,[128,128]>
  %2 = arith.constant {value = 0} : i32
  %BK = arith.constant {value = 32} : i32
  %acc.1 = scf.for %2, %K, %BK, %acc {step_const = 32} : tile<f32,[128,128]> \
(%k: i32, %acc.2: tile<f32,[128,128]>) {
    %BM.1 = arith.constant {value = 128} : i32
    %3 = arith.mul %m, %BM.1 : i32
    %4 = tile.load %A, %3, %k {shape = [128, 32]} : tile<f16,[128,32]>
    %B_T = tensor.transpose %B : tensor<f16,[K,N]>
    %BN.1 = arith.constant {value = 128} : i32
    %5 = arith.mul %n, %BN.1 : i32
    %6 = tile.load %B_T, %k, %5 {shape = [32, 128]} : tile<f16,[32,128]>
    %acc.3 = tile.dot %4, %6, %acc.2 : tile<f32,[128,128]>
    scf.yield %acc.3
  }
  %BM.2 = arith.constant {value = 128} : i32
  %7 = arith.mul %m, %BM.2 : i32
  %BN.2 = arith.constant {value = 128} : i32
  %8 = arith.mul %n, %BN.2 : i32
  tile.store %C, %7, %8, %acc.1
}
'''

# A signature with one of everything, for error tests that only write a body.
HEADER = ("def f(A: f16[M, K], B: f16[K, N], C: f32[M, N], D: bf16[K, N], E: f16[M, N], "
          "bias: f32[N], alpha: f32, count: i32, BM=128, BN=128, BK=32):\n")
GRID = "    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):\n"


# -------------------------------------------------------------------------------- helpers

def compile_text(text: str, consts: Optional[dict[str, Any]] = None,
                 filename: str = "test.tile") -> Kernel:
    kernel = lower(parse_function(textwrap.dedent(text), filename), consts)
    verify(kernel)
    return kernel


def kernel_body(body: str, consts: Optional[dict[str, Any]] = None) -> Kernel:
    """Compile ``body`` (the statements inside the grid loop, indented by 8)."""
    return compile_text(HEADER + GRID + body, consts)


def error_of(text: str, consts: Optional[dict[str, Any]] = None) -> TileError:
    with pytest.raises(TileError) as info:
        lower(parse_function(text, "test.tile"), consts)
    return info.value


def body_error(body: str) -> TileError:
    return error_of(HEADER + GRID + body)


def assert_points_at(err: TileError, line: int, col: int, text: str) -> None:
    """The error names test.tile:line:col, shows the line and puts the caret under ``text``."""
    assert err.loc is not None and (err.loc.line, err.loc.col) == (line, col), str(err)
    rendered = str(err)
    assert f"test.tile:{line}:{col}:" in rendered
    source_line, caret = rendered.split("\n")[1:3]
    assert source_line.strip() and caret.strip() == "^"
    assert source_line[caret.index("^"):].startswith(text), rendered


def samples() -> dict[str, ast.FunctionDef]:
    return {f.name: f for f in parse_module(SAMPLES, "samples.tile").functions}


# ---------------------------------------------------------------------------------- grammar

def test_grammar_is_lalr_without_conflicts() -> None:
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    handler = Collect()
    level = lark_logger.level
    lark_logger.addHandler(handler)
    lark_logger.setLevel(logging.DEBUG)
    try:
        Lark(_grammar_text(), parser="lalr", start="module", postlex=_TileIndenter(),
             propagate_positions=True, maybe_placeholders=True, debug=True)
    finally:
        lark_logger.removeHandler(handler)
        lark_logger.setLevel(level)
    assert not [r for r in records if "conflict" in r.lower()], records


def test_samples_parse_to_functions() -> None:
    module = parse_module(SAMPLES, "samples.tile")
    assert [f.name for f in module.functions] == ["matmul", "gemm", "matmul_bt"]
    matmul = module.functions[0]
    assert matmul.decorators == (ast.Decorator("tile", loc=matmul.loc),)
    assert [p.name for p in matmul.params] == ["A", "B", "C", "BM", "BN", "BK"]
    assert matmul.loc.line == 4 and matmul.loc.col == 5  # the function's name


def _reference(node: Any) -> Any:
    """``node`` rebuilt from plain frozen dataclasses with its classes' fields and flags:
    the equality, hash and repr that dataclass itself writes."""
    if isinstance(node, tuple):
        return tuple(_reference(item) for item in node)
    if not isinstance(node, ast.Node):
        return node
    cls = _reference_class(type(node))
    return cls(**{f.name: _reference(getattr(node, f.name)) for f in dataclasses.fields(node)})


@functools.cache
def _reference_class(cls: type) -> type:
    namespace: dict[str, Any] = {"__annotations__": {}, "__qualname__": cls.__qualname__}
    for f in dataclasses.fields(cls):
        namespace["__annotations__"][f.name] = object
        namespace[f.name] = dataclasses.field(default=None, compare=f.compare, repr=f.repr)
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (), namespace))


def test_nodes_compare_hash_and_read_as_dataclass_writes_them() -> None:
    # ast.Node gives every node class its __eq__, __hash__ and __repr__ (see the module).
    nodes = [node for function in parse_module(SAMPLES, "samples.tile").functions
             for node in ast.iter_nodes(function)]
    assert len({type(node) for node in nodes}) > 12
    for node in nodes:
        assert repr(node) == repr(_reference(node))
        assert hash(node) == hash(_reference(node))
    for a, b in itertools.islice(itertools.combinations(nodes, 2), 20000):
        assert (a == b) == (_reference(a) == _reference(b))
    name = ast.Name("x", loc=None)
    assert name == ast.Name("x", loc=name) and name != ast.Constant(1, loc=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        name.id = "y"


def test_ast_of_a_tile_access() -> None:
    f = parse_function("def f():\n    x = A[m*BM : +BM, k : +BK*2]\n")
    (assign,) = f.body
    assert isinstance(assign, ast.Assign)
    sub = assign.value
    assert isinstance(sub, ast.Subscript) and sub.value == ast.Name("A", loc=sub.loc)
    first, second = sub.indices
    assert first.start == ast.BinOp(ast.Name("m", loc=sub.loc), "*",
                                    ast.Name("BM", loc=sub.loc), loc=sub.loc)
    assert first.size == ast.Name("BM", loc=sub.loc) and first.stop is None
    # `+BK*2` parses as `(+BK)*2`; the size is BK*2 all the same.
    assert second.size == ast.BinOp(ast.Name("BK", loc=sub.loc), "*",
                                    ast.Constant(2, loc=sub.loc), loc=sub.loc)


def test_operators_keep_python_precedence_and_locations() -> None:
    f = parse_function("def f():\n    x = a + b * c @ d - -e\n", "p.tile", first_line=7,
                       col_offset=4)
    value = f.body[0].value
    # ((a + ((b * c) @ d)) - (-e))
    assert isinstance(value, ast.BinOp) and value.op == "-"
    assert value.left.op == "+" and value.left.right.op == "@"
    assert value.left.right.left.op == "*"
    assert isinstance(value.right, ast.UnaryOp) and value.right.op == "-"
    # Locations are in the original file: line 7 + 1, column + 4, at the operator.
    assert (value.loc.file, value.loc.line, value.loc.col) == ("p.tile", 8, 27)


@pytest.mark.parametrize("text", [
    # one-line loop bodies, semicolons, comments, blank lines
    "def f():\n    for m in grid(4): x = 1; y = 2\n",
    "def f():  # comment\n\n    # comment\n    for m in grid(4):\n\n        pass  # done\n",
    # parameters over several lines, trailing commas
    "def f(\n    A: f16[M, K],\n    B: f16[K, 64],\n    BM=128,\n):\n    pass\n",
    # decorators: @tile, @tilec.tile, none
    "@tile\ndef f():\n    pass\n",
    "@tilec.tile\ndef f():\n    pass\n",
    "import tilec\nfrom tilec import (tile,\n    f16,)\ndef f():\n    pass\n",
    # docstring
    'def f():\n    """A kernel."""\n    pass\n',
    # numbers
    "def f(X=0x10, Y=1_000, Z=1.5e-3, W=.5, V=-2):\n    pass\n",
    # shapes as tuples, keyword arguments, `None` indices, `.T`, method calls
    "def f():\n    x = zeros((BM, BN), dtype=f32)[:, None].to(f16)\n    y = B[0:+8, 0:+8].T\n",
    # line continuation
    "def f():\n    x = 1 + \\\n        2\n",
])
def test_valid_syntax(text: str) -> None:
    assert isinstance(parse_function(text, "ok.tile"), ast.FunctionDef)


def test_docstring_is_dropped() -> None:
    f = parse_function('def f():\n    """Doc."""\n    pass\n')
    assert len(f.body) == 1 and isinstance(f.body[0], ast.PassStmt)


# ----------------------------------------------------------------------------- syntax errors

@pytest.mark.parametrize("text, message, line, col", [
    ("def f():\n    for m in grid(1)\n        pass\n",
     "unexpected end of line: missing ':' at the end of the `for` line", 2, 21),
    ("def f()\n    pass\n", "missing ':' at the end of the `def` line", 1, 8),
    ("def f(A: f16[M*2, K]):\n    pass\n",
     "tensor dimensions are shape symbols (M) or integers (128)", 1, 15),
    ("def f():\npass\n", "expected an indented block", 2, 1),
    ("def f():\n    pass\n        pass\n", "unexpected indentation", 3, 9),
    ("def f():\n    x = 1 +\n", "an operator needs an expression on its right", 2, 12),
    ("def f():\n    x =\n", "expected an expression after '='", 2, 8),
    ("def f():\n    for in grid(1):\n        pass\n", "expected loop variable names", 2, 12),
    ("def f(A: f16[M, K] B: f16[K, N]):\n    pass\n", "parameters are separated by ','",
     1, 20),
    ("def f():\n    x = (1,\n", "'(' is never closed", 2, 9),
    ("def f():\n  if 1:\n        pass\n    pass\n",
     "this line's indentation matches no enclosing block", 4, 5),
])
def test_syntax_errors_say_what_was_expected(text: str, message: str, line: int,
                                            col: int) -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse_function(text, "test.tile")
    assert message in info.value.message
    assert_points_at(info.value, line, col, "")


@pytest.mark.parametrize("suffix", [".tile", ".py"])
def test_a_line_continued_onto_a_blank_line_is_blamed_where_it_ends(tmp_path, suffix) -> None:
    """A backslash continuing a line onto a blank one: the parser (and Python's) meets the
    end of the statement on the blank line, where no caret can point; the error goes to the
    end of the line the backslash ends (fuzzer seed 194, program 1441)."""
    from tilec.kernel import load_file
    text = ("from tilec import bf16, \\\n\n\n@tile\ndef k(A: f16[M, K]):\n"
            "    for m, n in grid(1, 1):\n        pass\n")
    with pytest.raises(TileSyntaxError) as info:
        load_file(str(tmp_path / f"k{suffix}"), text)
    assert (info.value.loc.line, info.value.loc.col) == (1, len("from tilec import bf16, \\") + 1)
    assert info.value.source_line == "from tilec import bf16, \\"
    assert "^" in str(info.value)


def test_syntax_error_lists_expected_tokens_in_words() -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse_function("def f():\n    x = y)\n", "test.tile")
    assert info.value.message == "unexpected ')'; expected ',', ';', '=' or a new line"
    with pytest.raises(TileSyntaxError) as info:
        parse_function("def f():\n    for m in grid(1) x:\n        pass\n", "test.tile")
    assert info.value.message == "unexpected name 'x'; expected an operator, ',' or ':'"
    with pytest.raises(TileSyntaxError) as info:
        parse_function("def f():\n    x = a $ b\n", "test.tile")
    assert info.value.message.startswith("unexpected character '$'; expected an operator")


def test_syntax_error_names_an_open_bracket_on_an_earlier_line() -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse_function("def f():\n    x = [a, b\n    y = 2\n", "test.tile")
    assert info.value.hint == "the '[' on line 2 is still open"


def test_syntax_error_positions_are_in_the_original_file() -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse_function("def f():\n    x = 1 +\n", "big.py", first_line=40, col_offset=8)
    err = info.value
    assert (err.loc.file, err.loc.line, err.loc.col) == ("big.py", 41, 20)
    assert err.source_line == "            x = 1 +"  # the indentation is put back


@pytest.mark.parametrize("text, message, fragment", [
    ("def f():\n    while x:\n        pass\n", "`while` loops are not supported", "while"),
    ("def f():\n    x = a < b < c\n", "chained comparisons are not supported", "< c"),
    ("def f():\n    x = a in b\n", "`in` is not supported", "in b"),
    ("def f():\n    x = a is not b\n", "`is not` is not supported", "is not"),
    ("def f():\n    def g():\n        pass\n", "functions defined inside", "g()"),
    ("def f():\n    g = lambda x: x\n", "lambdas are not supported", "lambda"),
    ("def f():\n    s = 'text'\n", "strings are not supported", "'text'"),
    ("def f():\n    return 1\n", "`return` is not supported", "return"),
    ("def f():\n    x = a if c else b\n", "conditional expressions", "if c"),
    ("def f():\n    x = a & b\n", "bitwise operators are not supported", "& b"),
    ("def f():\n    with x:\n        pass\n", "`with` statements are not supported", "with"),
    ("def f():\n    x, y = 1, 2\n", "tuple assignment is not supported", "x, y"),
    ("def f():\n    x = y = 1\n", "chained assignment", "x = y"),
    ("def f():\n    x: f32 = 1\n", "annotated assignments are not supported", "x: f32"),
    ("def f():\n    x = True\n", "`True` / `False` are not supported", "True"),
    ("def f():\n    x = {}\n", "dicts and sets are not supported", "{}"),
    ("def f():\n    x = g(*a)\n", "`*args` / `**kwargs` are not supported", "*a"),
    ("def f(*args):\n    pass\n", "`*args` / `**kwargs` parameters", "*args"),
    ("def f(x):\n    pass\n", "parameter 'x' needs a type or a default", "x)"),
    ("def f() -> int:\n    pass\n", "tile functions return nothing", "-> int"),
    ("class K:\n    pass\n", "classes are not supported", "class"),
    ("def f():\n    pass\nx = 1\n", "only imports and @tile functions", "x = 1"),
    ("@foo\ndef f():\n    pass\n", "unknown decorator '@foo'", "@foo"),
    ("@tile(BM=64)\ndef f():\n    pass\n", "@tile takes no arguments", "@tile("),
])
def test_unsupported_python_is_refused_where_it_is(text: str, message: str,
                                                   fragment: str) -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse_function(text, "test.tile")
    err = info.value
    assert message in err.message
    rendered = str(err)
    source_line, caret = rendered.split("\n")[1:3]
    assert source_line[caret.index("^"):].startswith(fragment), rendered


def test_the_first_refused_construct_in_the_source_is_reported() -> None:
    with pytest.raises(TileSyntaxError) as info:
        parse_function("def f():\n    x = 'a'\n    while y:\n        pass\n", "test.tile")
    assert "strings" in info.value.message


def test_parse_function_wants_exactly_one_function() -> None:
    with pytest.raises(TileSyntaxError, match="expected one tile function, found 2"):
        parse_function("def f():\n    pass\ndef g():\n    pass\n")
    with pytest.raises(TileSyntaxError, match="found no function"):
        parse_function("import tilec\n")


# -------------------------------------------------------------------------- golden IR text

@pytest.mark.parametrize("name, golden", [("matmul", GOLDEN_MATMUL), ("gemm", GOLDEN_GEMM),
                                          ("matmul_bt", GOLDEN_MATMUL_BT)])
def test_golden_ir_of_the_samples(name: str, golden: str) -> None:
    kernel = lower(samples()[name])
    verify(kernel)
    assert print_kernel(kernel) == golden


def test_transposed_load_equals_load_from_transposed_view() -> None:
    text = SAMPLES.split("@tile")[3].replace(
        "B.T[k : +BK, n*BN : +BN]", "B[n*BN : +BN, k : +BK].T")
    kernel = compile_text("@tile" + text)
    lines = print_kernel(kernel).splitlines()
    # Same ops as B.T[...]: the offsets are computed first, then the view is taken.
    assert "    %B_T = tensor.transpose %B : tensor<f16,[K,N]>" in lines
    assert "    %6 = tile.load %B_T, %k, %5 {shape = [32, 128]} : tile<f16,[32,128]>" in lines


def test_kernel_structure_and_locations() -> None:
    kernel = lower(samples()["gemm"])
    assert kernel.name == "gemm"
    assert [p.name for p in kernel.params] == ["A", "B", "C", "bias", "alpha", "beta"]
    assert kernel.params[3].type == TensorType(F32, ("N",))
    assert kernel.params[4].type == ScalarType(F32)
    assert kernel.symbols == ["M", "K", "N"]
    assert kernel.consts == {"BM": 128, "BN": 128, "BK": 32}
    assert [a.hint for a in kernel.body.args] == ["A", "B", "C", "bias", "alpha", "beta",
                                                  "M", "K", "N"]
    assert kernel.source_file == "samples.tile"
    assert kernel.source_lines == tuple(SAMPLES.splitlines())
    for op in kernel.walk():
        assert op.loc is not None and op.loc.file == "samples.tile", op.name
        assert kernel.source_lines[op.loc.line - 1].strip()
    dot = next(op for op in kernel.walk() if op.name == "tile.dot")
    line = kernel.source_lines[dot.loc.line - 1]
    assert line[dot.loc.col - 1] == "@"
    store = [op for op in kernel.walk() if op.name == "tile.store"][-1]
    assert kernel.source_lines[store.loc.line - 1][store.loc.col - 1:].startswith("C[")


def test_overrides_replace_constant_defaults() -> None:
    kernel = lower(samples()["matmul"], {"BM": 64, "BK": 16})
    verify(kernel)
    assert kernel.consts == {"BM": 64, "BN": 128, "BK": 16}
    text = print_kernel(kernel)
    assert "tile<f16,[64,16]>" in text and "{step_const = 16}" in text


def test_unknown_override_lists_the_constants() -> None:
    with pytest.raises(TileNameError) as info:
        lower(samples()["matmul"], {"BKK": 64})
    assert "unknown constant 'BKK' for 'matmul' (its constants: BM, BN, BK)" in str(info.value)
    assert info.value.hint == "did you mean 'BK'?"
    with pytest.raises(TileTypeError, match="constant 'BM' is an integer"):
        lower(samples()["matmul"], {"BM": 1.5})


def test_signature() -> None:
    sig = signature(samples()["gemm"])
    assert [(p.name, p.kind, p.dtype, p.dims) for p in sig.params] == [
        ("A", "tensor", F16, ("M", "K")), ("B", "tensor", F16, ("K", "N")),
        ("C", "tensor", F16, ("M", "N")), ("bias", "tensor", F32, ("N",)),
        ("alpha", "scalar", F32, ()), ("beta", "scalar", F32, ())]
    assert sig.symbols == ("M", "K", "N")
    assert sig.consts == {"BM": 128, "BN": 128, "BK": 32}


# ---------------------------------------------------------------------------- lowering

def test_vector_add_with_fixed_dims_and_a_one_axis_grid() -> None:
    kernel = compile_text("""\
        def add(X: f32[N], Y: f32[N], Z: f32[N], W: f16[64, N], n: i32, B=1024):
            for i in grid(cdiv(N, B)):
                Z[i*B : +B] = X[i*B : +B] + Y[i*B : +B]
        """)
    assert kernel.params[3].type == TensorType(F16, (64, "N"))
    assert kernel.params[4].type == ScalarType(I32)
    names = [op.name for op in kernel.walk()]
    assert names[-1] == "tile.store" and "tile.add" in names


def test_bare_product_accumulates_into_fresh_zeros() -> None:
    kernel = kernel_body("        x = A[0:+BM, 0:+BK] @ B[0:+BK, 0:+BN]\n")
    names = [op.name for op in kernel.walk()]
    assert names[-2:] == ["tile.full", "tile.dot"]
    full = [op for op in kernel.walk() if op.name == "tile.full"][-1]
    assert full.attrs == {"shape": (128, 128), "value": 0.0}


def test_product_plus_f32_tile_fuses_into_one_dot() -> None:
    kernel = kernel_body("        acc = zeros([BM, BN])\n"
                         "        acc = A[0:+BM, 0:+BK] @ B[0:+BK, 0:+BN] + acc\n")
    names = [op.name for op in kernel.walk()]
    assert names.count("tile.dot") == 1 and names.count("tile.full") == 1
    assert "tile.add" not in names
    # With a broadcast operand there is nothing to fuse into: dot into zeros, then add.
    kernel = kernel_body("        x = A[0:+BM, 0:+BK] @ B[0:+BK, 0:+BN] + bias[0:+BN]\n")
    names = [op.name for op in kernel.walk()]
    assert names[-4:] == ["tile.full", "tile.dot", "tile.broadcast", "tile.add"]


def test_broadcasting_reshapes_and_splats() -> None:
    kernel = kernel_body("        t = bias[0:+BN]\n"
                         "        C[0:+BM, 0:+BN] = zeros([BM, BN]) + t[None, :] * t[:, None]\n"
                         "        E[0:+BM, 0:+BK] = A[0:+BM, 0:+BK] * 2 - 1.5\n")
    text = print_kernel(kernel)
    assert "tile.reshape %t : tile<f32,[1,128]>" in text
    assert "tile.reshape %t : tile<f32,[128,1]>" in text
    assert text.count("tile.broadcast") == 2
    # Number literals take the tile's dtype.
    assert "arith.constant {value = 2.0} : f16" in text
    assert "arith.constant {value = 1.5} : f16" in text
    assert "tile.splat" in text


def test_constant_arithmetic_folds() -> None:
    kernel = kernel_body("        x = zeros([BM * 2 // 4, BK // 2 + 1 - 1], f16)\n"
                         "        y = A[m*BM : (m + 1)*BM, 0 : BK // 2]\n")
    text = print_kernel(kernel)
    assert "tile.full {shape = [64, 16], value = 0.0} : tile<f16,[64,16]>" in text
    assert "{shape = [128, 16]} : tile<f16,[128,16]>" in text


def test_scalar_index_arithmetic() -> None:
    kernel = kernel_body("        i = max(m, n) // 2 + cdiv(M, 3) % 4 - min(count, 7)\n"
                         "        C[i : +16, -i : +16] = zeros([16, 16])\n")
    names = [op.name for op in kernel.walk()]
    for name in ("arith.max", "arith.floordiv", "arith.cdiv", "arith.mod", "arith.min",
                 "arith.sub", "arith.add"):
        assert name in names


def test_loop_carried_values_and_nested_loops() -> None:
    kernel = kernel_body(
        "        acc = zeros([BM, BN])\n"
        "        s = 0\n"
        "        for k in range(0, K, BK):\n"
        "            for j in range(4):\n"
        "                acc += A[0:+BM, k:+BK] @ B[k:+BK, 0:+BN]\n"
        "                s = s + j\n"
        "            t = s * 2\n"
        "        C[s:+BM, 0:+BN] = acc\n")
    outer = next(op for op in kernel.walk() if op.name == "scf.for")
    assert [r.hint for r in outer.results] == ["acc", "s"]
    assert [a.hint for a in outer.regions[0].args] == ["k", "acc", "s"]
    inner = next(op for op in outer.regions[0].ops if op.name == "scf.for")
    assert inner.attrs == {"step_const": 1}
    assert [a.hint for a in inner.regions[0].args] == ["j", "acc", "s"]
    store = [op for op in kernel.walk() if op.name == "tile.store"][-1]
    assert store.operands[1] is outer.results[1] and store.operands[-1] is outer.results[0]


def test_tensor_view_bound_to_a_name() -> None:
    kernel = kernel_body("        Bt = B.T\n        x = Bt[0:+BN, 0:+BK]\n")
    text = print_kernel(kernel)
    assert "%B_T = tensor.transpose %B : tensor<f16,[N,K]>" in text
    assert "tile.load %B_T" in text


def test_stores_of_numbers_and_scalars_are_splatted() -> None:
    kernel = kernel_body("        C[0:+BM, 0:+BN] = 0\n        C[0:+BM, 0:+BN] = alpha\n")
    names = [op.name for op in kernel.walk()]
    assert names.count("tile.splat") == 2 and names.count("tile.store") == 2


def test_augmented_store_loads_adds_and_stores() -> None:
    kernel = kernel_body("        acc = zeros([BM, BN])\n"
                         "        C[m*BM : +BM, n*BN : +BN] += acc\n")
    names = [op.name for op in kernel.walk()]
    # The value (load + add) first, then the target's offsets, as Python evaluates them.
    assert names[-7:] == ["tile.load", "tile.add", "arith.constant", "arith.mul",
                          "arith.constant", "arith.mul", "tile.store"]


def test_full_with_a_scalar_and_a_cast() -> None:
    kernel = kernel_body("        x = full([BM], alpha, f16)\n        y = full([BM], 3, bf16)\n")
    text = print_kernel(kernel)
    assert "tile.splat %alpha {shape = [128]} : tile<f32,[128]>" in text
    assert "%x = tile.cast" in text
    assert "%y = tile.full {shape = [128], value = 3.0} : tile<bf16,[128]>" in text


# ----------------------------------------------------------------------- semantic errors

@pytest.mark.parametrize("body, kind, message, line, col, fragment", [
    # unknown names and functions, with did-you-mean
    ("        acc = zeros([BM, BN])\n        x = acc2 + 1\n", TileNameError,
     "unknown name 'acc2'", 4, 13, "acc2"),
    ("        x = foo(1)\n", TileNameError, "unknown function 'foo'", 3, 13, "foo"),
    ("        x = zeroes([BM], f32)\n", TileNameError, "unknown function 'zeroes'", 3, 13,
     "zeroes"),
    # dtypes
    ("        x = A[0:+BM, 0:+BK] @ D[0:+BK, 0:+BN]\n", TileTypeError,
     "dot operands differ in dtype: f16 @ bf16", 3, 29, "@"),
    ("        x = A[0:+BM, 0:+BK] + D[0:+BM, 0:+BK]\n", TileTypeError,
     "dtypes differ: f16 + bf16", 3, 29, "+"),
    ("        E[0:+BM, 0:+BN] = zeros([BM, BN], f32)\n", TileTypeError,
     "storing an f32 tile [128,128] into 'E', an f16 tensor", 3, 27, "zeros"),
    ("        x = A[0:+BM, 0:+BK] + count\n", TileTypeError,
     "an i32 scalar cannot be combined with a tile", 3, 29, "+"),
    ("        x = alpha + count\n", TileTypeError,
     "cannot combine an i32 scalar with an f32 scalar", 3, 19, "+"),
    ("        x = count / 2\n", TileTypeError, "'/' divides floats; integers use '//'", 3,
     19, "/"),
    # shapes and ranks
    ("        x = A[0:+BM, 0:+32] @ B[0:+64, 0:+BN]\n", TileShapeError,
     "inner dimensions differ: [128,32] @ [64,128]", 3, 29, "@"),
    ("        x = bias[0:+BN] @ B[0:+BN, 0:+BN]\n", TileShapeError,
     "'@' multiplies 2-D tiles; its left operand is an f32 tile [128]", 3, 25, "@"),
    ("        x = A[0:+BM]\n", TileShapeError,
     "the tensor 'A' is 2-D but this access has 1 slice", 3, 13, "A[0"),
    ("        x = bias.T\n", TileShapeError, "'.T' needs a 2-D tensor", 3, 18, "T"),
    ("        x = zeros([BM, BN]) + bias[0:+64]\n", TileShapeError,
     "shapes do not broadcast: [128,128] + [64]", 3, 29, "+"),
    ("        C[0:+BM, 0:+BN] = zeros([BM, BK])\n", TileShapeError,
     "storing an f32 tile [128,32] into a [128,128] slice of 'C'", 3, 9, "C["),
    ("        x = zeros([BM, BN, BK])\n", TileShapeError, "tiles have 1 or 2 dims, not 3",
     3, 19, "["),
    ("        t = bias[0:+BN]\n        u = t[:, :]\n", TileShapeError,
     "a tile can only be indexed as t[:, None] or t[None, :]", 4, 13, "t["),
    # non-constant tile sizes
    ("        x = A[m*BM : +m, 0:+BK]\n", TileShapeError,
     "a tile size must be a compile-time constant", 3, 23, "m,"),
    ("        x = A[m : n, 0:+BK]\n", TileShapeError,
     "the tile size (stop - start) is not a compile-time constant", 3, 19, "n,"),
    ("        x = A[0:+BM, 0]\n", TileShapeError,
     "a tensor access takes slices, not single indices", 3, 22, "0]"),
    ("        x = A[0:+BM, :]\n", TileShapeError, "a tensor access needs the tile size", 3,
     22, ":]"),
    ("        x = A[0:+BM, 0:+BK/2]\n", TileShapeError,
     "a tile size must be an integer, not 16.0", 3, 25, "BK/2"),
    ("        x = zeros([BM, -1])\n", TileShapeError,
     "a tile dimension must be positive, not -1", 3, 24, "-1"),
    ("        for k in range(0, K, count):\n            pass\n", TileError,
     "the loop step must be a positive compile-time integer", 3, 30, "count"),
    # assignment to parameters, constants, symbols, loop variables
    ("        A = zeros([BM])\n", TileError, "cannot assign to parameter 'A'", 3, 9, "A ="),
    ("        BM = 64\n", TileError, "cannot assign to compile-time constant 'BM'", 3, 9,
     "BM"),
    ("        M = 64\n", TileError, "cannot assign to shape symbol 'M'", 3, 9, "M ="),
    ("        m += 1\n", TileError, "cannot assign to program id 'm'", 3, 9, "m +="),
    ("        for k in range(4):\n            k = 3\n", TileError,
     "cannot assign to loop variable 'k'", 4, 13, "k ="),
    ("        zeros = 3\n", TileError, "cannot assign to the built-in name 'zeros'", 3, 9,
     "zeros"),
    # loop scoping and loop-carried types
    ("        for k in range(4):\n            t = k\n        u = t\n", TileNameError,
     "'t' is assigned only inside the loop at line 3", 5, 13, "t"),
    ("        for k in range(4):\n            pass\n        u = k\n", TileNameError,
     "'k' is the loop variable of the loop at line 3", 5, 13, "k"),
    ("        acc = zeros([BM, BN], f16)\n        for k in range(4):\n"
     "            acc += A[0:+BM, 0:+BK] @ B[0:+BK, 0:+BN]\n", TileTypeError,
     "'acc' changes type inside the loop", 5, 13, "acc +="),
    ("        for k in range(4):\n            for k in range(2):\n                pass\n",
     TileNameError, "loop variable 'k' hides an existing name", 4, 17, "k in"),
    # transposes and methods
    ("        x = zeros([BM, BN]).T\n", TileError,
     "'.T' applies to a tensor parameter (A.T) or to a tile loaded from one", 3, 29, "T"),
    ("        x = A.to(f16)\n", TileTypeError, ".to() converts tiles, not the tensor 'A'", 3,
     15, "to("),
    ("        x = zeros([BM]).to(f64)\n", TileNameError, "unknown name 'f64'", 3, 28, "f64"),
    ("        x = zeros([BM]).foo()\n", TileError, "unknown method '.foo()'", 3, 25, "foo"),
    ("        x = zeros([BM]).shape\n", TileError, "unknown attribute '.shape'", 3, 25,
     "shape"),
    # calls
    ("        x = zeros([BM], f32, 1)\n", TileError, "zeros() takes at most 2 arguments", 3,
     30, "1)"),
    ("        x = zeros([BM], dtype=f16, order=1)\n", TileError,
     "zeros() has no parameter 'order'", 3, 36, "order"),
    ("        x = full([BM])\n", TileError, "full() is missing its 'value' argument", 3, 13,
     "full"),
    ("        x = relu(count)\n", TileTypeError, "relu() takes a tile, not an i32 scalar", 3,
     13, "relu"),
    ("        x = range(4)\n", TileError, "range(...) can only be the iterable of a loop", 3,
     13, "range"),
    ("        zeros([BM])\n", TileError, "this expression's value is not used", 3, 9,
     "zeros"),
    ("        x = None\n", TileError, "None is only meaningful in t[:, None]", 3, 13, "None"),
    ("        x = [1, 2]\n", TileError, "a list is only meaningful as a tile shape", 3, 13,
     "[1"),
    ("        x = 1 // 0\n", TileError, "division by zero in a constant expression", 3, 15,
     "//"),
    ("        x = A + 1\n", TileTypeError, "cannot use the tensor 'A' in a + b", 3, 15, "+"),
])
def test_semantic_errors(body: str, kind: type, message: str, line: int, col: int,
                         fragment: str) -> None:
    err = body_error(body)
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    assert message in err.message, str(err)
    assert_points_at(err, line, col, fragment)


def test_did_you_mean_hints() -> None:
    err = body_error("        acc = zeros([BM, BN])\n        x = acc2 + 1\n")
    assert err.hint == "did you mean 'acc'?"
    err = body_error("        x = zeroes([BM], f32)\n")
    assert err.hint == "did you mean 'zeros'?"
    err = body_error("        x = A[0:+BM, 0:+BK].to(f16) + B[0:+BM, 0:+BK]\n"
                     "        C[0:+BM, 0:+BK] = x\n")
    assert err.hint == "convert it first: (...).to(f32)"


@pytest.mark.parametrize("text, message, line, fragment", [
    (HEADER + "    x = 1\n" + GRID + "        pass\n",
     "a tile function's body is a single `for ... in grid(...)` loop", 2, "x = 1"),
    (HEADER + GRID + "        pass\n    x = 1\n",
     "a tile function's body is a single `for ... in grid(...)` loop", 4, "x = 1"),
    (HEADER + GRID + "        pass\n" + GRID + "        pass\n",
     "a tile function has a single grid loop", 4, "for m"),
    (HEADER + "    for k in range(0, K, BK):\n        pass\n",
     "the top-level loop of a tile function must be `for ... in grid(...)`", 2, "for k"),
    (HEADER + "    pass\n", "'f' has no grid loop", 1, "f("),
    (HEADER + GRID + "        for i in grid(4):\n            pass\n",
     "grid loops cannot be nested", 3, "grid(4)"),
    (HEADER + GRID + "        for i in cdiv(4, 2):\n            pass\n",
     "loops inside the grid iterate over range(...)", 3, "cdiv"),
    (HEADER + "    for m in grid(M, m):\n        pass\n",
     "the grid has 2 axes but the loop names 1 program id", 2, "m in"),
    (HEADER + "    for m, n in grid(M, m):\n        pass\n",
     "grid sizes cannot depend on the program ids", 2, "m):"),
    (HEADER + "    for m in grid(count):\n        pass\n",
     "grid sizes may use only shape symbols and constants; 'count' is a parameter", 2,
     "count"),
    (HEADER + "    for a, b, c, d in grid(1, 2, 3, 4):\n        pass\n",
     "a grid has 1 to 3 axes, not 4", 2, "grid"),
    (HEADER + "    for A in grid(4):\n        pass\n",
     "program id 'A' hides an existing name", 2, "A in"),
    ("def f(A: f16[M, K], A: f16[K]):\n    pass\n", "duplicate parameter 'A'", 1, "A: f16[K]"),
    ("def f(A: f16[B, M, K, N]):\n    pass\n", "tensors have 1 to 3 dims (3: a batch of "
     "matrices); 'A' has 4", 1, "A"),
    ("def f(A: f64[M, K]):\n    pass\n", "unknown dtype 'f64'", 1, "f64"),
    ("def f(A: f64[M, K]):\n    pass\n", "unknown dtype 'f64'", 1, "f64"),
    ("def f(x: f16):\n    pass\n", "scalar parameters are f32 or i32, not f16", 1, "f16"),
    ("def f(A: f16[M, 0]):\n    pass\n", "a tensor dimension is a shape symbol (M) or a "
     "positive integer", 1, "0]"),
    ("def f(A: f16[A, K]):\n    pass\n", "'A' names both a shape symbol and a parameter", 1,
     "A, K"),
    ("def f(BM=M):\n    pass\n", "the default of constant 'BM' must be a number", 1, "M)"),
])
def test_structural_errors(text: str, message: str, line: int, fragment: str) -> None:
    err = error_of(text)
    assert message in err.message, str(err)
    assert err.loc is not None and err.loc.line == line, str(err)
    source_line, caret = str(err).split("\n")[1:3]
    assert source_line[caret.index("^"):].startswith(fragment), str(err)


def test_no_exception_other_than_tile_error_escapes() -> None:
    """Random small edits of the samples must fail with TileError or compile cleanly."""
    rng = random.Random(7)
    pieces = list("()[]:,+-*/@.=\n \t#'0123456789mnkMNKABC_") + [
        "for ", " in ", "grid(", "range(", ".T", "None", "    ", "\n    ", "zeros(", "@ "]
    for _ in range(150):
        text = list(SAMPLES)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text))
            choice = rng.random()
            if choice < 0.4:
                del text[i]
            elif choice < 0.8:
                text.insert(i, rng.choice(pieces))
            else:
                text[i] = rng.choice(pieces)
        try:
            for function in parse_module("".join(text), "fuzz.tile").functions:
                verify(lower(function))
        except TileError as err:
            assert err.loc is None or err.loc.file == "fuzz.tile"
            str(err)


# ------------------------------------------------------------------------------- sources

def tile(fn: Any) -> Any:
    """Stands in for tilec's decorator: the frontend only reads the source."""
    return fn


def test_function_source_of_an_indented_function_keeps_columns() -> None:
    @tile
    def scale(X: f32[N], Y: f32[N], B=256):
        for i in grid(cdiv(N, B)):
            Y[i*B : +B] = X[i*B : +B] * 2.0

    source = function_source(scale)
    text, filename, first_line, col_offset, lines = source
    assert text.startswith("@tile\ndef scale(")
    assert filename == __file__
    assert col_offset == 4
    file_lines = Path(__file__).read_text().splitlines()
    assert lines == tuple(file_lines)
    assert file_lines[first_line - 1].strip() == "@tile"

    func = parse_callable(scale)
    assert func.loc.line == source.first_line + 1
    assert file_lines[func.loc.line - 1][func.loc.col - 1:].startswith("scale(")
    kernel = lower(func)
    verify(kernel)
    assert kernel.source_file == __file__
    mul = next(op for op in kernel.walk() if op.name == "tile.mul")
    assert file_lines[mul.loc.line - 1][mul.loc.col - 1:].startswith("* 2.0")
    # parse_function(*function_source(fn)) gives the same locations.
    assert parse_function(*source).loc == func.loc


def test_function_source_errors_point_into_the_file() -> None:
    @tile
    def broken(A: f16[M, K], C: f16[M, K], BM=64):
        for m in grid(cdiv(M, BM)):
            C[m*BM : +BM, 0 : +BM] = A[m*BM : +BM, 0 : +BM] + acc

    with pytest.raises(TileNameError) as info:
        lower(parse_callable(broken))
    err = info.value
    assert err.loc.file == __file__
    assert err.source_line.strip().endswith("+ acc")
    assert err.source_line[err.loc.col - 1:] == "acc"


def test_function_source_without_python_source() -> None:
    with pytest.raises(TileError, match="cannot read the source of 'len'"):
        function_source(len)


def test_tile_file(tmp_path: Path) -> None:
    path = tmp_path / "samples.tile"
    path.write_text(SAMPLES)
    found = tile_functions_in_file(path)
    assert [name for name, _ in found] == ["matmul", "gemm", "matmul_bt"]
    functions = parse_file(path)
    assert list(functions) == ["matmul", "gemm", "matmul_bt"]
    kernel = lower(functions["gemm"])
    assert kernel.source_file == str(path)
    assert print_kernel(kernel) == GOLDEN_GEMM


PY_FILE = '''\
"""A Python module with tile functions; the frontend reads it and never runs it."""
import tilec
from tilec import tile

raise SystemExit("the frontend must not execute this file")


def helper(x):
    return x + 1


@tile
def matmul(A: f16[M, K], B: f16[K, N], C: f32[M, N], BM=128, BN=128, BK=32):
    for m, n in grid(cdiv(M, BM), cdiv(N, BN)):
        acc = zeros([BM, BN], f32)
        for k in range(0, K, BK):
            acc += A[m*BM : +BM, k : +BK] @ B[k : +BK, n*BN : +BN]
        C[m*BM : +BM, n*BN : +BN] = acc


class Holder:
    @tile
    def not_top_level(self):
        pass


@tilec.tile
def copy(X: f16[N], Y: f16[N], B=128):
    for i in grid(cdiv(N, B)):
        Y[i*B : +B] = X[i*B : +B] + undefined_name
'''


def test_python_file(tmp_path: Path) -> None:
    path = tmp_path / "kernels.py"
    path.write_text(PY_FILE)
    functions = parse_file(path)
    assert list(functions) == ["matmul", "copy"]
    kernel = lower(functions["matmul"])
    verify(kernel)
    assert kernel.source_lines == tuple(PY_FILE.splitlines())
    dot = next(op for op in kernel.walk() if op.name == "tile.dot")
    assert dot.loc.line == 17 and PY_FILE.splitlines()[16][dot.loc.col - 1] == "@"
    with pytest.raises(TileNameError) as info:
        lower(functions["copy"])
    assert info.value.loc.line == 30
    assert str(info.value).startswith(f"{path}:30:")


def test_python_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("x = 1\n\n@tile\ndef f():\n    while True:\n        pass\n")
    with pytest.raises(TileSyntaxError) as info:
        parse_file(path)
    assert (info.value.loc.line, info.value.loc.col) == (5, 5)
    path.write_text("def f(:\n")
    with pytest.raises(TileSyntaxError, match="invalid Python"):
        parse_file(path)
    other = tmp_path / "kernel.cu"
    other.write_text("")
    with pytest.raises(TileError, match="neither a .tile nor a .py file"):
        parse_file(other)
    with pytest.raises(TileError, match="cannot read"):
        parse_file(tmp_path / "missing.tile")


def test_duplicate_functions_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "twice.tile"
    path.write_text("def f():\n    pass\n\ndef f():\n    pass\n")
    with pytest.raises(TileNameError, match="defined twice"):
        parse_file(path)
