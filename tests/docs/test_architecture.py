"""docs/architecture.md names every package and every module of privaudit/, and its layer table matches the
import-linter contract of pyproject.toml, so that a newcomer finds where each piece lives."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO

DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "privaudit"


def _modules() -> list[str]:
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def _packages() -> list[str]:
    return sorted(str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)


def test_every_module_appears_in_the_architecture_doc():
    text = DOC.read_text()
    missing = [m for m in _modules() if f"`{m}`" not in text]
    assert missing == [], f"modules not described in docs/architecture.md: {missing}"


def test_every_package_appears_with_what_it_may_import():
    text = DOC.read_text()
    missing = [p for p in _packages() if f"`{p}/`" not in text]
    assert missing == [], f"packages not described in docs/architecture.md: {missing}"


def test_the_doc_names_no_module_that_does_not_exist():
    """A module named in a backticked path under a package folder must exist (a rename that forgot the doc)."""
    text = DOC.read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)+[a-z_0-9]+\.py)`", text))
    gone = sorted(m for m in named if not (PACKAGE / m).exists() and not (REPO / m).exists())
    assert gone == []


def test_layers_in_the_doc_are_the_import_contract():
    layers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    text = DOC.read_text()
    for layer in layers:
        for pkg in layer.split("|"):
            assert pkg.strip() in text, pkg
