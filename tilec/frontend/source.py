"""Where tile functions' text comes from: a live Python function, a ``.tile`` file or a
``.py`` file (read with Python's ``ast`` module, never executed).

Locations stay those of the original file: each function is parsed with the line it starts
on and the indentation removed from it.
"""
from __future__ import annotations

import ast as pyast
import builtins
import inspect
import linecache
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, NamedTuple, Union

from tilec.errors import TileError, TileNameError, TileSyntaxError, located
from tilec.frontend import ast
from tilec.frontend.diagnostics import clamp_loc, split_lines
from tilec.frontend.parser import TILE_DECORATORS, dedent, parse_function, parse_module
from tilec.ir.core import Loc


class FunctionSource(NamedTuple):
    """A function's dedented text, its file, the file line the text starts on (the first
    decorator's), the indentation width removed (so that columns map back) and the lines
    of the whole file (for error messages and ``Kernel.source_lines``).

    The fields are ``parse_function``'s parameters, in order:
    ``parse_function(*function_source(fn))``.
    """

    text: str
    filename: str
    first_line: int
    col_offset: int
    source_lines: tuple[str, ...]


def function_source(fn: Callable[..., Any]) -> FunctionSource:
    """The source of a Python function (decorators included), ready for ``parse_function``.
    A wrapper that sets ``__wrapped__`` (functools.wraps) is looked through."""
    target = inspect.unwrap(fn)
    name = getattr(target, "__qualname__", repr(target))
    try:
        lines, first_line = inspect.getsourcelines(target)
        filename = inspect.getsourcefile(target) or inspect.getfile(target)
    except (OSError, TypeError) as err:
        raise TileError(f"cannot read the source of '{name}': {err}",
                        hint="define tile functions in a file, or give the text to "
                        "parse_function") from None
    first_line = max(first_line, 1)
    # inspect read the text through linecache, so the file's lines are there too; a
    # function without a file keeps its own lines at their places.
    file_lines = tuple(line.rstrip("\r\n") for line in linecache.getlines(filename))
    if not file_lines:
        file_lines = ("",) * (first_line - 1) + tuple(line.rstrip("\r\n") for line in lines)
    text, margin = dedent("".join(lines))
    return FunctionSource(text, filename, first_line, margin, file_lines)


def parse_callable(fn: Callable[..., Any]) -> ast.FunctionDef:
    """Parse a decorated Python function; locations are those of its file."""
    return parse_function(*function_source(fn))


def tile_functions_in_file(path: Union[str, Path]) -> list[tuple[str, ast.FunctionDef]]:
    """The tile functions of a ``.tile`` file (imports and ``@tile`` functions only) or of a
    ``.py`` file (its top-level functions decorated with ``@tile`` / ``@tilec.tile``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TileError(f"cannot read '{path}': {err}") from None
    if path.suffix == ".tile":
        functions = list(parse_module(text, str(path)).functions)
    elif path.suffix == ".py":
        functions = tile_functions_in_python(text, str(path))
    else:
        raise TileError(f"'{path}' is neither a .tile nor a .py file")
    seen: dict[str, ast.FunctionDef] = {}
    for function in functions:
        if function.name in seen:
            first = seen[function.name].loc.line
            raise located(TileNameError, f"tile function '{function.name}' is defined twice "
                          f"(first on line {first})", function.loc, function.source_lines)
        seen[function.name] = function
    return [(function.name, function) for function in functions]


def tile_functions_in_python(text: str, filename: str) -> list[ast.FunctionDef]:
    # Python reads "\r\n" and a lone "\r" as line ends; with them made "\n" first, the
    # line numbers of Python's ast, of the tile parser and of the messages agree.
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = split_lines(text)
    if "\0" in text:
        # Python's own error for this names no place.
        before = text[:text.index("\0")].split("\n")
        raise located(TileSyntaxError, "the file contains a null byte",
                      Loc(filename, len(before), len(before[-1]) + 1), lines)
    try:
        tree = pyast.parse(text, filename)
    except SyntaxError as err:
        loc = clamp_loc(Loc(filename, err.lineno or 1, err.offset or 1), lines)
        raise located(TileSyntaxError, f"invalid Python: {err.msg}", loc, lines) from None
    _warn_if_import_fails(tree, filename, lines)
    functions = []
    for node in tree.body:
        if not isinstance(node, (pyast.FunctionDef, pyast.AsyncFunctionDef)):
            continue
        if not any(_is_tile_decorator(d) for d in node.decorator_list):
            continue
        if isinstance(node, pyast.AsyncFunctionDef):
            raise located(TileSyntaxError, "tile functions cannot be async",
                          Loc(filename, node.lineno, node.col_offset + 1), lines)
        # Decorators start their own lines; the segment keeps the file's line numbers.
        first = min([d.lineno for d in node.decorator_list] + [node.lineno])
        segment = "\n".join(lines[first - 1:node.end_lineno]) + "\n"
        functions.append(parse_function(segment, filename, first, source_lines=lines))
    return functions


def _is_tile_decorator(node: pyast.expr) -> bool:
    if isinstance(node, pyast.Call):
        node = node.func  # @tile(...) is found here and refused by the parser with a reason
    if isinstance(node, pyast.Name):
        return node.id in TILE_DECORATORS
    if isinstance(node, pyast.Attribute) and isinstance(node.value, pyast.Name):
        return f"{node.value.id}.{node.attr}" in TILE_DECORATORS
    return False


class AnnotationWarning(UserWarning):
    """A ``.py`` file that tilec reads fine but that Python cannot import."""


# Python 3.14 evaluates annotations only when something asks for them (PEP 649 / PEP 749),
# and tilec never asks: from that version on, the shapes need no __future__ import.
ANNOTATIONS_DEFERRED = sys.version_info >= (3, 14)
FUTURE_LINE = "from __future__ import annotations"


def _warn_if_import_fails(tree: pyast.Module, filename: str, lines: list[str]) -> None:
    """Warn, at the first shape symbol Python would evaluate, when importing the file would
    stop with ``NameError: name 'M' is not defined`` before ``@tile`` runs: tilec reads the
    file without importing it, so its own commands work, but ``import`` of it does not."""
    if ANNOTATIONS_DEFERRED or _has_future_annotations(tree):
        return
    bound = _module_names(tree) | set(dir(builtins))
    for node in tree.body:
        if not isinstance(node, pyast.FunctionDef) \
                or not any(_is_tile_decorator(d) for d in node.decorator_list):
            continue
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        for argument in arguments:
            for name in pyast.walk(argument.annotation) if argument.annotation else ():
                if isinstance(name, pyast.Name) and name.id not in bound:
                    message = (f"column {name.col_offset + 1}: importing this file fails "
                               f"with NameError: name '{name.id}' is not defined (Python "
                               f"{sys.version_info.major}.{sys.version_info.minor} evaluates "
                               f"annotations); add `{FUTURE_LINE}` as the file's first "
                               f"statement. Python 3.14 and later need no such line.")
                    warnings.warn_explicit(message, AnnotationWarning, filename, name.lineno)
                    return


def _has_future_annotations(tree: pyast.Module) -> bool:
    return any(isinstance(node, pyast.ImportFrom) and node.module == "__future__"
               and any(alias.name == "annotations" for alias in node.names)
               for node in tree.body)


def _module_names(tree: pyast.Module) -> set[str]:
    """Names bound at the module's top level (imports, assignments, definitions)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (pyast.Import, pyast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (pyast.FunctionDef, pyast.AsyncFunctionDef, pyast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (pyast.Assign, pyast.AnnAssign, pyast.AugAssign)):
            targets = node.targets if isinstance(node, pyast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in pyast.walk(target) if isinstance(n, pyast.Name))
    return names
