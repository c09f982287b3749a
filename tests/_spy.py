"""Observing the library from outside, independently of where it imports things.

* :func:`spy_everywhere` wraps a function and installs the wrapper under
  every name that holds it in every loaded module: a call through a
  module-top ``from x import f``, through ``x.f`` or through an import inside
  a function is counted alike, so moving an import cannot make a test blind.
* :func:`watch_reads` records the operating-system accesses to a logs
  *folder* through a Python audit hook (PEP 578): listing the folder
  (``os.scandir`` / ``os.listdir``, which every reader must do to find the
  Parquet parts) or opening a file inside it from Python. It does not
  depend on any name in privaudit.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

_READ_EVENTS = ("open", "os.scandir", "os.listdir", "glob.glob", "os.open")
_watched: list[tuple[str, list]] = []
_lock = threading.Lock()
_hook_installed = False
_patches: list[tuple] = []  # (func, replacement) of every patch_everywhere since the last heal_patches


def spy_everywhere(monkeypatch, func) -> list:
    """Count calls of ``func`` whoever calls it; returns the list of call records.

    Each record is a dict ``{"args": args, "kwargs": kwargs, "stack": [module names]}``
    (the privaudit modules on the call stack, innermost first), so a test can
    tell, e.g., the auditor's own calls from the pipeline's.
    """
    calls: list = []

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        stack, frame = [], sys._getframe(1)
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if name.startswith("privaudit"):
                stack.append(name)
            frame = frame.f_back
        calls.append({"args": args, "kwargs": kwargs, "stack": stack})
        return func(*args, **kwargs)

    patch_everywhere(monkeypatch, func, wrapper)
    return calls


def _holders(value):
    """(module, name) of every name that holds ``value`` in privaudit's and the tests' loaded modules."""
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if not d or not getattr(mod, "__name__", "").startswith(("privaudit", "tests")):
            continue
        for name, held in list(d.items()):
            if held is value:
                yield mod, name


def patch_everywhere(monkeypatch, func, replacement) -> None:
    """Replace ``func`` by ``replacement`` under every name that holds it in privaudit's and the tests' modules.

    monkeypatch restores the names it replaced; a module imported *while* the patch is in place
    (the CLI imports each command's module on first use) binds ``replacement`` by its own
    ``from x import f``, which monkeypatch never saw. :func:`heal_patches` (run after every test by
    tests/conftest.py) rebinds those to ``func``: without it, a test that patched ``write_logs``
    before the first ``simulate`` of its xdist worker left every later ``simulate`` of that worker
    failing with the patch's "No space left on device".
    """
    _patches.append((func, replacement))
    for mod, name in list(_holders(func)):
        monkeypatch.setattr(mod, name, replacement)


def heal_patches() -> None:
    """Undo what monkeypatch cannot: names bound to a replacement by modules imported during the patch."""
    while _patches:
        func, replacement = _patches.pop()
        for mod, name in list(_holders(replacement)):
            setattr(mod, name, func)


def _hook(event, args):
    if event not in _READ_EVENTS or not _watched or not args:
        return
    target = args[0]
    if isinstance(target, int) or target is None:
        return
    try:
        p = os.path.abspath(os.fsdecode(target))
    except TypeError:
        return
    with _lock:
        for root, events in _watched:
            if p == root or p.startswith(root + os.sep):
                events.append((event, p))


@contextmanager
def watch_reads(path):
    """Record the accesses to ``path`` (a logs folder) inside the block; yields the list of (event, path)."""
    global _hook_installed
    if not _hook_installed:  # audit hooks cannot be removed: one for the whole session
        sys.addaudithook(_hook)
        _hook_installed = True
    events: list = []
    entry = (os.path.abspath(Path(path)), events)
    with _lock:
        _watched.append(entry)
    try:
        yield events
    finally:
        with _lock:
            _watched.remove(entry)
