"""lark's contextual lexer for the tile grammar, with scanners that are cheap to make.

lark gives every parser state a scanner for the terminals that state accepts: one regular
expression alternating them all, compiled when the parser first reaches the state, and a
second one for the keywords a name-like terminal must give way to. A cold parse of
``samples/matmul.py`` reached 33 states and compiled 51 such expressions: 16 ms of a cold
``tilec compile``, each state paying again for terminals the others compiled already.

Here each terminal's expression is compiled once per process, and a state's scanner tries
its terminals one at a time in the order of lark's alternation. A Python regular expression
``(?P<A>a)|(?P<B>b)|...`` matches with its first alternative that matches where the scan
stands, whole-string matching (``fullmatch``, the keyword check) likewise, so the scanner
finds the token lark's would, of the same type. Everything else is lark's own code: which
terminals a state accepts and in which order, which keywords a terminal gives way to, the
positions, the errors.

:data:`PLUGINS` is the option that plugs these classes into a :class:`lark.Lark` (lark's
``_plugins``: its contextual lexer makes each state's lexer from its ``BasicLexer``
attribute). They need lark's ``re`` module (the ``regex`` option off) and ``str`` input.
"""
from __future__ import annotations

import functools
import re
from copy import copy
from typing import Any, Callable, Optional

from lark.lexer import (BasicLexer, CallChain, ContextualLexer, PatternRE, PatternStr,
                        UnlessCallback)
from lark.utils import classify


@functools.lru_cache(maxsize=None)
def _compiled(regexp: str, flags: int) -> re.Pattern:
    return re.compile(regexp, flags)


@functools.lru_cache(maxsize=None)
def _matches_all_of(regexp: str, text: str, flags: int) -> bool:
    """Whether ``regexp`` matches at the start of ``text`` and takes it all (lark's
    ``_get_match(...) == text``); asked for every pair of a state's terminals."""
    found = _compiled(regexp, flags).match(text)
    return found is not None and found.group(0) == text


class Scanner:
    """lark's ``lexer.Scanner`` (``match``, ``fullmatch``, ``allowed_types``), matching one
    terminal at a time with expressions compiled once per process."""

    def __init__(self, terminals: list, g_regex_flags: int) -> None:
        self.terminals = terminals
        self.allowed_types = {t.name for t in terminals}
        self._patterns = [(t.name, _compiled(t.pattern.to_regexp(), g_regex_flags))
                          for t in terminals]

    def match(self, text: Any, pos: int) -> Optional[tuple[str, str]]:
        """The token at ``pos`` of ``text`` (lark's TextSlice): its value and type."""
        for name, pattern in self._patterns:
            found = pattern.match(text.text, pos, text.end)
            if found:
                return found.group(0), name
        return None

    def fullmatch(self, text: str) -> Optional[str]:
        for name, pattern in self._patterns:
            if pattern.fullmatch(text):
                return name
        return None


def _create_unless(terminals: list, g_regex_flags: int) -> tuple[list, dict]:
    """lark's ``lexer._create_unless`` with :class:`Scanner`: for each regular-expression
    terminal, the string terminals (keywords) of its priority it matches whole, which the
    token becomes when its text is one of them; strings such a terminal covers (and whose
    flags it has) leave the scanner."""
    by_type = classify(terminals, lambda t: type(t.pattern))
    embedded = set()
    callback = {}
    for retok in by_type.get(PatternRE, []):
        unless = []
        for strtok in by_type.get(PatternStr, []):
            if strtok.priority != retok.priority:
                continue
            if _matches_all_of(retok.pattern.to_regexp(), strtok.pattern.value, g_regex_flags):
                unless.append(strtok)
                if strtok.pattern.flags <= retok.pattern.flags:
                    embedded.add(strtok)
        if unless:
            callback[retok.name] = UnlessCallback(Scanner(unless, g_regex_flags))
    return [t for t in terminals if t not in embedded], callback


class TileBasicLexer(BasicLexer):
    """lark's BasicLexer, scanning with :class:`Scanner`."""

    def _build_scanner(self) -> Scanner:
        terminals, self.callback = _create_unless(self.terminals, self.g_regex_flags)
        for type_, f in self.user_callbacks.items():  # as lark's (tilec gives none)
            if type_ in self.callback:
                self.callback[type_] = CallChain(self.callback[type_], f,
                                                 lambda t: t.type == type_)
            else:
                self.callback[type_] = f
        return Scanner(terminals, self.g_regex_flags)


class TileContextualLexer(ContextualLexer):
    """lark's ContextualLexer, whose states' lexers (and the one it retries an error with)
    are :class:`TileBasicLexer`, each made when the parser first reaches its state (lark
    makes all 131 up front; a parse reaches a few dozen)."""

    BasicLexer = TileBasicLexer

    def __init__(self, conf: Any, states: Any, always_accept: Any = ()) -> None:
        if conf.re_module is not re or conf.use_bytes:
            raise ValueError("the tile lexer scans str with Python's re module")
        if not conf.skip_validation:  # a grammar being built: lark checks every state's
            super().__init__(conf, states, always_accept)  # terminals as it makes them
            return
        # What lark's __init__ does for each state, on first use (its validation is off for
        # tables loaded from a file, so there is no comparator).
        terminals = list(conf.terminals)
        trad_conf = copy(conf)
        trad_conf.terminals = terminals
        extra = set(conf.ignore) | set(always_accept)
        by_accepts: dict[frozenset, TileBasicLexer] = {}

        def state_lexer(state: int) -> TileBasicLexer:
            key = frozenset(states[state])
            lexer = by_accepts.get(key)
            if lexer is None:
                lexer_conf = copy(trad_conf)
                lexer_conf.terminals = [conf.terminals_by_name[name] for name in set(key) | extra
                                        if name in conf.terminals_by_name]
                lexer = by_accepts[key] = self.BasicLexer(lexer_conf, None)
            return lexer

        self.lexers = _StateLexers(state_lexer)
        trad_conf.skip_validation = True
        self.root_lexer = self.BasicLexer(trad_conf, None)


class _StateLexers(dict):
    """Parser state -> its lexer, each made on first lookup."""

    def __init__(self, make: Callable[[int], TileBasicLexer]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, state: int) -> TileBasicLexer:
        lexer = self[state] = self._make(state)
        return lexer


# lark's option naming the classes it makes the lexer from.
PLUGINS = {"ContextualLexer": TileContextualLexer}
