"""The tile lexer (tilec.frontend.lexer) against lark's own contextual lexer: on the samples,
their truncations and their edits, the same trees, or the same errors at the same places."""
from __future__ import annotations

from pathlib import Path

import pytest
from lark.exceptions import UnexpectedInput

from tilec.frontend import lexer, parse_tables, parser
from tilec.frontend.source import tile_functions_in_python

SAMPLES = sorted((Path(__file__).resolve().parents[1] / "samples").glob("*.py"))
# Characters whose insertion breaks a program in many ways: brackets, operators, keywords'
# and names' letters, digits, strings, indentation.
INSERTS = ["(", ")", "[", "]", ":", ",", "+", "*", "@", "=", "\n", " ", "    ", "x", "1",
           ".", "'", "#", "if ", "in", "\t", "-", "/", "**", "1e"]


@pytest.fixture(scope="module")
def parsers():
    stock = parse_tables.load_parser(parser._grammar_text(), parser._PARSER_OPTIONS,
                                     parser._TileIndenter)
    tile = parser.grammar_parser()
    # Both behind the indenter (lark's PostLexConnector).
    assert isinstance(tile.parser.lexer.lexer, lexer.TileContextualLexer)
    assert not isinstance(stock.parser.lexer.lexer, lexer.TileContextualLexer)
    return stock, tile


def _texts() -> list[str]:
    texts = []
    for path in SAMPLES:
        source = path.read_text(encoding="utf-8")
        for function in tile_functions_in_python(source, str(path)):
            lines = source.splitlines(keepends=True)
            first = function.loc.line - len(function.decorators)
            texts.append("".join(lines[first - 1:]))
    return texts


def _outcome(parse, text: str):
    try:
        return "tree", parse(text)
    except UnexpectedInput as err:
        token = getattr(err, "token", None)
        return (type(err).__name__, err.line, err.column, str(token), getattr(token, "type", None),
                frozenset(getattr(err, "expected", None) or ()),
                frozenset(getattr(err, "allowed", None) or ()), getattr(err, "char", None))
    except Exception as err:  # noqa: BLE001 - the indenter's errors, compared by kind
        return type(err).__name__, str(err)


def test_samples_truncated_and_edited_parse_alike(parsers):
    stock, tile = parsers
    cases = 0
    for text in _texts():
        assert _outcome(tile.parse, text)[0] == "tree"
        variants = [text[:cut] for cut in range(0, len(text), 11)]
        for position in range(0, len(text), 17):
            insert = INSERTS[position % len(INSERTS)]
            variants.append(text[:position] + insert + text[position:])
        for variant in variants:
            assert _outcome(tile.parse, variant) == _outcome(stock.parse, variant), variant
            cases += 1
    assert cases > 200


def _message(text: str) -> str:
    try:
        parser.parse_module(text)
    except Exception as err:  # noqa: BLE001 - compared as text
        return f"{type(err).__name__}: {err}"
    return "parsed"


def test_errors_read_the_same_through_the_frontend(parsers, monkeypatch):
    stock, _ = parsers
    broken = [example for examples in parser._EXAMPLES.values() for example in examples]
    broken += ["def f():\n    x = 1 $ 2\n", "def f():\n    x = 'a\n", "def f(:\n",
               "def f():\n    x = 0x\n", "def f():\n    x = (1,\n    y = 2\n",
               "def f():\n    if x:\n        pass\n", "def f():\n    x = 1e\n"]
    ours = [_message(text) for text in broken]
    assert sum(message.startswith("TileSyntaxError") for message in ours) > 15
    monkeypatch.setattr(parser, "grammar_parser", lambda: stock)
    assert [_message(text) for text in broken] == ours
