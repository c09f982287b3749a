"""The decompressed cache of the ICU-Sepsis tables: same arrays as the npz, written once, never required.

``privaudit.mdp.icu_sepsis._read_tables`` writes the decompressed arrays of
``dynamics.npz`` to a cache folder named by the npz's SHA-256 on the first
read and memory-maps them afterwards (issue 19: 0.6 s of CPU per run). A
missing, corrupt or unwritable cache falls back to the npz.
"""

from __future__ import annotations

import numpy as np
import pytest

from privaudit.mdp import icu_sepsis as icu


def _npz_arrays(keys=icu._ARRAYS):
    """The arrays ``keys`` of ``dynamics.npz``, read directly (each one decompressed only when asked for)."""
    with np.load(icu.default_data_dir() / "dynamics.npz") as z:
        return {k: np.array(z[k], dtype=np.float64) for k in keys}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    icu._read_tables.cache_clear()
    yield tmp_path / "cache"
    icu._read_tables.cache_clear()


def _load():
    icu._read_tables.cache_clear()
    return icu._tables(None)


def test_first_read_writes_the_cache_and_later_reads_map_it(cache):
    want = _npz_arrays()
    first = _load()
    (folder,) = cache.iterdir()
    assert folder.name.startswith("icu-sepsis-") and sorted(p.stem for p in folder.iterdir()) == sorted(icu._ARRAYS)
    second = _load()
    for k in icu._ARRAYS:
        assert not isinstance(first[k], np.memmap) and isinstance(second[k], np.memmap)
        np.testing.assert_array_equal(first[k], want[k])
        np.testing.assert_array_equal(second[k], want[k])
        assert second[k].dtype == np.float64 and not second[k].flags.writeable
    mdp = icu.load_icu_sepsis()
    assert mdp.P.shape == (716, 25, 716)


def test_corrupt_cache_falls_back_to_the_npz(cache):
    _load()
    (folder,) = cache.iterdir()
    (folder / "tx_mat.npy").write_bytes(b"not an array")
    got = _load()
    want = _npz_arrays(["tx_mat"])["tx_mat"]
    np.testing.assert_array_equal(got["tx_mat"], want)
    again = _load()  # the fallback rewrote the entry
    assert isinstance(again["tx_mat"], np.memmap)
    np.testing.assert_array_equal(again["tx_mat"], want)


def test_unwritable_cache_location_is_not_an_error(cache):
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("a file where the cache folder would go")  # mkdir under it fails
    got = _load()
    np.testing.assert_array_equal(got["r_mat"], _npz_arrays(["r_mat"])["r_mat"])
