"""Choices and help texts read from the algorithm registry when they are shown, not when a module is imported.

A learner registered after ``privaudit.cli`` was imported (``core.registry.register`` from one's own
module, or a test) is then an ``--algo`` choice, an ``audit --mechanism`` built-in and listed in the
help of both commands, with no other file changed. Reading the texts imports no learner until a help
page is shown (``privaudit --help`` stays fast).
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Callable

import click

from privaudit.core import registry

#: How an offline learner reads LOGS, by (private, reads), for the help of ``privaudit train``.
READS_TEXT = {
    (True, "release"): "private: from LOGS the counts are released first (the budget is spent; the release is kept "
                       "next to the policy as OUT.release) and the policy is post-processing of that release; from "
                       "--release DIR nothing more is spent",
    (True, "logs"): "private: reads LOGS once and adds its own Gaussian noise (zCDP only: --rho, or --epsilon with "
                    "--delta; no Laplace, no --noise); no release folder is written",
    (False, "logs"): "NOT private: reads the exact logs and prints a warning",
    (False, "counts"): "NOT private: reads the exact logs and prints a warning",
}


class RegistryChoice(click.Choice):
    """A :class:`click.Choice` whose choices are ``names()`` (a registry query) each time they are read."""

    def __init__(self, names: Callable[[], tuple[str, ...]]):
        self._names = names
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._names())

    @choices.setter
    def choices(self, value) -> None:  # click's __init__ assigns it; the registry decides
        pass


class LiveHelpOption(click.Option):
    """A :class:`click.Option` whose help is ``help_fn()``, computed when the help page is shown."""

    def __init__(self, *args, help_fn: Callable[[], str], **kwargs):
        self._help_fn = help_fn
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str:
        return self._help_fn()

    @help.setter
    def help(self, value) -> None:
        pass


class LiveHelpCommand(click.Command):
    """A :class:`click.Command` whose help is ``help_fn(docstring)``, computed when the help page is shown.

    ``help_fn`` receives the docstring with its indentation removed (``inspect.cleandoc``).
    """

    def __init__(self, *args, help_fn: Callable[[str], str], **kwargs):
        self._help_fn = help_fn
        self._template = ""
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str:
        return self._help_fn(inspect.cleandoc(self._template))

    @help.setter
    def help(self, value) -> None:
        self._template = value or ""


def joined(names: tuple[str, ...], sep: str = ", ") -> str:
    """``names`` joined for a help text ("none" when empty)."""
    return sep.join(names) or "none"


def learner_lines(indent: int = 2, width: int = 78) -> str:
    """One wrapped entry per offline learner: name, family, how it reads LOGS, the registry's summary."""
    out = []
    for name in registry.names(family=registry.OFFLINE):
        entry = registry.get(name)
        cls = entry.load()
        text = f"{name} ({entry.family}; {READS_TEXT[(bool(cls.private), cls.reads)]}): {entry.summary}."
        out.append(textwrap.fill(text, width, initial_indent=" " * indent, subsequent_indent=" " * (indent + 2)))
    return "\n".join(out)


def release_readers() -> tuple[str, ...]:
    """Offline learners that post-process a count release (imports their classes)."""
    return registry.names_with(lambda cls: cls.reads == "release")


def private_tabular() -> tuple[str, ...]:
    """Private tabular learners, for the "use a private learner" hints."""
    return registry.names(family="tabular", private=True)


__all__ = ["RegistryChoice", "LiveHelpOption", "LiveHelpCommand", "READS_TEXT", "joined", "learner_lines",
           "release_readers", "private_tabular"]
