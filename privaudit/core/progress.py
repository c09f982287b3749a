"""Progress bars on stderr (tqdm) for the long loops of the library, off unless a caller turns them on.

The CLI turns them on for every command when stderr is a terminal
(``privaudit.cli.common.handle_errors``); library callers may use
:func:`progress_enabled`. Bars write to stderr only, so ``--json`` output on
stdout stays clean, and they vanish when done (``leave=False``).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterable, Iterator, TypeVar

from tqdm import tqdm

T = TypeVar("T")
_ENABLED: ContextVar[bool] = ContextVar("privaudit_progress", default=False)


@contextmanager
def progress_enabled(flag: bool | None = None) -> Iterator[bool]:
    """Show the library's bars inside the block (``None``: when stderr is a terminal)."""
    on = sys.stderr.isatty() if flag is None else bool(flag)
    token = _ENABLED.set(on)
    try:
        yield on
    finally:
        _ENABLED.reset(token)


def bar(total: int, desc: str, unit: str = "it") -> tqdm:
    """A tqdm bar on stderr, disabled unless progress is enabled."""
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not _ENABLED.get(), leave=False)


def iterate(items: Iterable[T], total: int, desc: str, unit: str = "it") -> Iterator[T]:
    """Iterate ``items`` with a bar of ``total`` steps (see :func:`bar`)."""
    with bar(total, desc, unit) as b:
        for x in items:
            yield x
            b.update(1)
