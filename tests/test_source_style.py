"""The source's line length: at most 100 characters a line in every Python and shell file of
the project (pyproject's one-line inline tables aside: TOML cannot break them)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 100
SOURCES = [*(path for folder in ("tilec", "passes", "backend", "grammar", "tests", "samples",
                                 "benchmarks", "scripts")
             for pattern in ("*.py", "*.sh", "*.lark")
             for path in (ROOT / folder).rglob(pattern)),
           ROOT / ".ci" / "run"]


def test_no_line_is_longer_than_100_characters():
    long = [f"{path.relative_to(ROOT)}:{number}: {len(line)} characters"
            for path in SOURCES if path.is_file()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > MAX_LINE]
    assert not long, "\n".join(long)


def test_the_check_reads_the_sources():
    assert len(SOURCES) > 300 and ROOT / "tilec" / "options.py" in SOURCES
