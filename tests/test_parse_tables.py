"""The parser's cached LALR tables: used when sound, rebuilt and repaired when stale,
tampered with, or not a plain file of ours."""
import marshal
import os

import pytest

from tilec.frontend import lexer, parse_tables, parser

SAMPLE = "@tile\ndef f(A: f16[M, K], BM=64):\n    for m in grid(cdiv(M, BM)):\n        pass\n"


def _load(directory):
    return parse_tables.load_parser(parser._grammar_text(), parser._PARSER_OPTIONS,
                                    parser._TileIndenter, directory)


def _table_file(directory):
    files = list((directory / "parser").glob("tables-*"))
    assert len(files) == 1
    return files[0]


def _refuse_build(monkeypatch):
    def fail(*args):
        raise AssertionError("built the parser although a sound table file exists")
    monkeypatch.setattr(parse_tables, "_build", fail)


def test_tables_are_written_then_loaded_and_parse_the_same(tmp_path, monkeypatch):
    built = _load(tmp_path)
    path = _table_file(tmp_path)
    assert path.stat().st_mode & 0o077 == 0
    _refuse_build(monkeypatch)
    loaded = _load(tmp_path)
    assert loaded.parse(SAMPLE) == built.parse(SAMPLE)


def test_plugins_are_not_stored_and_load_again(tmp_path, monkeypatch):
    def plugged():
        return parse_tables.load_parser(parser._grammar_text(), parser._PARSER_OPTIONS,
                                        parser._TileIndenter, tmp_path, plugins=lexer.PLUGINS)
    built = plugged()
    stored = marshal.loads(_table_file(tmp_path).read_bytes())
    assert b"TileContextualLexer" not in stored["tables"]
    _refuse_build(monkeypatch)
    loaded = plugged()
    assert isinstance(loaded.parser.lexer.lexer, lexer.TileContextualLexer)
    assert loaded.parse(SAMPLE) == built.parse(SAMPLE)


def test_key_covers_grammar_lark_version_and_options(monkeypatch):
    grammar = parser._grammar_text()
    key = parse_tables.table_key(grammar, parser._PARSER_OPTIONS)
    assert parse_tables.table_key(grammar + "\n// edited", parser._PARSER_OPTIONS) != key
    assert parse_tables.table_key(grammar, {**parser._PARSER_OPTIONS, "start": "x"}) != key
    monkeypatch.setattr(parse_tables.lark, "__version__", "0.0.1")
    assert parse_tables.table_key(grammar, parser._PARSER_OPTIONS) != key


def _tamper(path):
    stored = marshal.loads(path.read_bytes())
    assert b"module" in stored["tables"]
    stored["tables"] = stored["tables"].replace(b"module", b"modulf", 1)
    path.write_bytes(marshal.dumps(stored))


def _wrong_key(path):
    stored = marshal.loads(path.read_bytes())
    stored["key"] = "0" * 64
    path.write_bytes(marshal.dumps(stored))


def _not_marshal(path):
    path.write_text('{"key": "0"}')


def _symlink_to_dev_zero(path):
    path.unlink()
    path.symlink_to("/dev/zero")


def _fifo(path):
    path.unlink()
    os.mkfifo(path)


def _directory(path):
    path.unlink()
    path.mkdir()


def _group_writable(path):
    path.chmod(0o664)


def _truncated(path):
    path.write_bytes(path.read_bytes()[:1000])


@pytest.mark.parametrize("damage", [_tamper, _wrong_key, _symlink_to_dev_zero, _fifo,
                                    _group_writable, _truncated, _not_marshal])
def test_unsound_table_file_is_a_miss_and_is_repaired(tmp_path, damage, monkeypatch):
    expected = _load(tmp_path).parse(SAMPLE)
    path = _table_file(tmp_path)
    damage(path)
    assert _load(tmp_path).parse(SAMPLE) == expected
    assert path.is_file() and not path.is_symlink()
    _refuse_build(monkeypatch)  # the rewritten file is sound again
    assert _load(tmp_path).parse(SAMPLE) == expected


def test_directory_in_place_of_the_file_still_parses(tmp_path):
    _load(tmp_path)
    path = _table_file(tmp_path)
    _directory(path)
    assert _load(tmp_path).parse(SAMPLE).data == "module"


def test_unwritable_cache_dir_only_costs_time(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert _load(blocker).parse(SAMPLE).data == "module"


def test_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEC_PARSER_CACHE", "0")
    _load(tmp_path)
    assert not (tmp_path / "parser").exists()
