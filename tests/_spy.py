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


def patch_everywhere(monkeypatch, func, replacement) -> None:
    """Replace ``func`` by ``replacement`` under every name that holds it in privaudit's and the tests' modules."""
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if not d or not getattr(mod, "__name__", "").startswith(("privaudit", "tests")):
            continue
        for name, value in list(d.items()):
            if value is func:
                monkeypatch.setattr(mod, name, replacement)


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
