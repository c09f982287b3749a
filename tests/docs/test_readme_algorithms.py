"""The README's table of algorithms names every registered algorithm with its command (issue 27 item 2:
"one table of every algorithm"), so that a learner or explorer added to the registry is not missing there."""

from __future__ import annotations

import re

from privaudit.core import registry
from tests.conftest import REPO


def table_commands(text: str) -> set[str]:
    """The ``--algo`` names in the command column of the README's algorithm table (rows starting with ``|``)."""
    rows = [line for line in text.splitlines() if line.startswith("|") and "--algo" in line]
    return {m for row in rows for m in re.findall(r"--algo ([a-z0-9-]+)", row.rsplit("|", 2)[-2])}


def test_every_registered_algorithm_is_in_the_readme_table():
    family = {a: "train" if registry.get(a).family in registry.OFFLINE else "explore" for a in registry.names()}
    text = (REPO / "README.md").read_text()
    assert set(registry.names()) - table_commands(text) == set()
    for name, command in family.items():  # under the command that runs it
        assert re.search(rf"`{command} --algo {re.escape(name)}`", text), name


def test_a_missing_row_is_seen():
    """Broken control: a table without one name, and a name outside the command column, are not counted."""
    text = ("| algorithm | paper | private? | command |\n|---|---|---|---|\n"
            "| VE | baseline | no | `train --algo ve` |\n"
            "| APVI (see `train --algo apvi`) | x | no | `audit` |\n")
    assert table_commands(text) == {"ve"}
