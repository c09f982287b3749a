"""Numeric option types of every command: click's, but refusing what only Python reads as a number.

click's ``FLOAT`` and ``INT`` call ``float()`` and ``int()``, which accept underscores between digits
(PEP 515): ``--rho 1_0`` was a budget of 10, ``--episodes 1_000`` a thousand episodes, where a typo
for ``1.0`` or ``1,0`` is at least as likely. They also read other scripts' digits (``float("٣")`` is 3.0,
``float("１")`` 1.0). A number on the command line is written in ASCII digits without underscores; these
types refuse anything else with a usage error naming the option (exit 2) before any work.
"""

from __future__ import annotations

import click


class _Plain:
    """Refuse a string holding ``_`` or a non-ASCII character before click's conversion."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and ("_" in value or not value.isascii()):
            self.fail(f"{value!r} is not a number: write it in ASCII digits, without underscores (e.g. 10, 0.5 "
                      "or 1e6).", param, ctx)
        return super().convert(value, param, ctx)


class Float(_Plain, click.types.FloatParamType):
    """``float`` without underscores."""


class Int(_Plain, click.types.IntParamType):
    """``int`` without underscores."""


class FloatRange(_Plain, click.FloatRange):
    """``click.FloatRange`` without underscores."""


class IntRange(_Plain, click.IntRange):
    """``click.IntRange`` without underscores."""


#: The plain number types (``type=FLOAT`` for ``type=float``, ``type=INT`` for ``type=int``).
FLOAT = Float()
INT = Int()

__all__ = ["FLOAT", "INT", "Float", "Int", "FloatRange", "IntRange"]
