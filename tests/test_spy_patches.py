"""The tests' patch helper leaves nothing behind (tests/_spy.py, patch_everywhere / heal_patches)."""

from __future__ import annotations

import sys
import types

from privaudit.mdp.simulate import write_logs
from tests._spy import heal_patches, patch_everywhere


def test_a_module_imported_during_a_patch_is_healed(monkeypatch):
    """A module imported while write_logs is patched binds the replacement (as the CLI's lazily imported
    command modules do); monkeypatch's undo misses it, heal_patches rebinds it to the real function.
    Before heal_patches, one test's "disk full" patch broke every later `simulate` of its xdist worker."""
    def full(*a, **k):
        raise OSError("patched")

    late = types.ModuleType("tests._late_import_probe")
    try:
        with monkeypatch.context() as mp:
            patch_everywhere(mp, write_logs, full)
            assert sys.modules["privaudit.mdp.simulate"].write_logs is full
            late.write_logs = sys.modules["privaudit.mdp.simulate"].write_logs  # `from ... import write_logs`
            sys.modules[late.__name__] = late
        assert sys.modules["privaudit.mdp.simulate"].write_logs is write_logs  # monkeypatch's own undo
        assert late.write_logs is full  # what monkeypatch never saw
        heal_patches()
        assert late.write_logs is write_logs
    finally:
        sys.modules.pop(late.__name__, None)
