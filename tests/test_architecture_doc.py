"""docs/ARCHITECTURE.md against the code: the files it names exist, and its lists of what a
new instruction or data-movement family provides are exactly the base classes' hooks."""
from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from tilec.families.movement import MovementFamily
from tilec.families.product import ProductFamily

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DOC.index(f"### {title}")
    end = DOC.find("\n### ", start + 1)
    return DOC[start:end if end != -1 else len(DOC)]


def _listed(section: str, lead: str) -> set[str]:
    """The backticked names of the paragraph that starts with ``lead``."""
    paragraph = section[section.index(lead):].split("\n\n")[0]
    return set(re.findall(r"`([a-z_0-9]+)`", paragraph))


def _abstract_hooks(cls: type) -> set[str]:
    return {name for name, member in inspect.getmembers(cls)
            if getattr(member, "__isabstractmethod__", False)}


def _attributes(cls: type) -> set[str]:
    """The annotated class attributes a subclass sets (identity, not methods)."""
    return {name for name in cls.__annotations__ if not name.startswith("_")}


def test_every_path_the_doc_names_exists() -> None:
    paths = set(re.findall(r"`((?:tilec|passes|backend|grammar|tests|docs|scripts)/[\w/.<>]*)`",
                           DOC))
    assert len(paths) > 20
    missing = [p for p in paths if "<" not in p and not (ROOT / p).exists()]
    assert missing == []


@pytest.mark.parametrize("title, cls, attributes_lead", [
    ("How to add an instruction family", ProductFamily, "Identity the subclass sets"),
    ("How to add a data-movement family", MovementFamily, "Attributes it sets"),
])
def test_the_doc_lists_every_hook_of_the_family_base(title: str, cls: type,
                                                     attributes_lead: str) -> None:
    section = _section(title)
    assert _listed(section, "Hooks it implements") == _abstract_hooks(cls)
    assert _listed(section, attributes_lead) == _attributes(cls)
