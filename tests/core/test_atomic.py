"""Atomic writes (privaudit.core.atomic) and output checks (privaudit.core.outputs)."""

import os
import stat

import numpy as np
import pytest

from privaudit.core.atomic import atomic_dir, atomic_path, atomic_paths, atomic_write_text
from privaudit.core.errors import UsageError
from privaudit.core.jsonio import json_default
from privaudit.core.npyio import numpy_load_reason
from privaudit.core.outputs import check_sidecar_free, new_run_id, output_lock, stale_temporaries


def test_atomic_write_text_replaces_whole_file_with_plain_permissions(tmp_path):
    path = tmp_path / "sub" / "a.json"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    mask = os.umask(0)
    os.umask(mask)
    assert path.read_text() == "two"
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.json"]


def test_failure_inside_atomic_path_keeps_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_atomic_paths_renames_none_when_the_last_write_fails(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with pytest.raises(OSError):
        with atomic_paths([a, b]) as (ta, tb):
            ta.write_text("a")
            raise OSError("No space left on device")
    assert list(tmp_path.iterdir()) == []
    with atomic_paths([a, b]) as (ta, tb):
        ta.write_text("a")
        tb.write_text("b")
    assert (a.read_text(), b.read_text()) == ("a", "b")


def test_atomic_dir_refuses_existing_folder_without_overwrite(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "x").write_text("1")
    with pytest.raises(FileExistsError):
        with atomic_dir(out):
            pass
    with atomic_dir(out, overwrite=True) as tmp:
        (tmp / "y").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["y"]


def test_output_lock_refuses_second_writer_and_removes_stale_temporaries(tmp_path):
    out = tmp_path / "out"
    (tmp_path / ".out.abcdefgh.tmp").mkdir()
    (tmp_path / ".out.short.tmp").write_text("not ours")
    assert [p.name for p in stale_temporaries(out)] == [".out.abcdefgh.tmp"]
    with output_lock(out) as removed:
        assert [p.name for p in removed] == [".out.abcdefgh.tmp"]
        with pytest.raises(UsageError, match="another run is writing it now"):
            with output_lock(out):
                pass
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.short.tmp"]
    with output_lock(out):  # released
        pass


def test_check_sidecar_free_refuses_file_and_folder(tmp_path):
    side = tmp_path / "out.local-log.json"
    check_sidecar_free(side, "the log", "release")
    side.mkdir()
    with pytest.raises(UsageError, match="is not a file"):
        check_sidecar_free(side, "the log", "release")
    side.rmdir()
    side.write_text("{}")
    with pytest.raises(UsageError, match="already exists"):
        check_sidecar_free(side, "the log", "release")


def test_run_ids_json_default_and_numpy_reasons():
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
    assert json_default(np.int64(3)) == 3 and json_default(np.arange(2)) == [0, 1]
    with pytest.raises(TypeError):
        json_default(object())
    assert numpy_load_reason(IsADirectoryError()) == "it is a folder, not a file"
    assert "not a NumPy" in numpy_load_reason(ValueError("Cannot load file containing pickled data"))
