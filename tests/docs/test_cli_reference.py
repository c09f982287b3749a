"""docs/cli.md is generated from the commands' --help (docs/make_cli_reference.py) and must not be stale."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO


def _generator():
    spec = importlib.util.spec_from_file_location("make_cli_reference", REPO / "docs" / "make_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_up_to_date():
    expected = _generator().render()
    actual = (REPO / "docs" / "cli.md").read_text()
    assert actual == expected, "docs/cli.md is stale: run python docs/make_cli_reference.py"


def test_cli_reference_covers_every_command_and_budget_subcommand():
    from privaudit.cli import COMMANDS
    from privaudit.cli.budget import command as budget

    text = (REPO / "docs" / "cli.md").read_text()
    assert "## `privaudit`\n" in text
    for name in COMMANDS:
        assert f"## `privaudit {name}`\n" in text, name
    for sub in budget.commands:
        assert f"## `privaudit budget {sub}`\n" in text, sub
    assert "--rho" in text.split("## `privaudit pipeline`", 1)[1]  # the options themselves, not only titles
