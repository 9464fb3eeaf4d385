"""The tile DSL's frontend: source text -> AST (:mod:`.parser`) -> IR kernel (:mod:`.lower`).

Typical use::

    func = parse_callable(matmul)                # or parse_function(text, "file.tile")
    kernel = lower(func, {"BM": 64})             # checked, verified IR
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

from tilec.frontend import ast
from tilec.frontend.lower import ParamInfo, Signature, lower, signature
from tilec.frontend.parser import parse_function, parse_module
from tilec.frontend.source import (FunctionSource, function_source, parse_callable,
                                   tile_functions_in_file)


def parse_file(path: Union[str, Path]) -> dict[str, ast.FunctionDef]:
    """The tile functions of a ``.tile`` or ``.py`` file by name, in file order."""
    return dict(tile_functions_in_file(path))


__all__ = ["ast", "FunctionSource", "ParamInfo", "Signature", "function_source", "lower",
           "parse_callable", "parse_file", "parse_function", "parse_module", "signature",
           "tile_functions_in_file"]
