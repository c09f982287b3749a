"""Save and load tabular MDPs as versioned ``.npz`` files.

Layout (format version 1), all plain numpy arrays, read with
``allow_pickle=False``:

| key | shape, dtype | meaning |
|---|---|---|
| ``format_version`` | (), int64 | 1; readers refuse other versions |
| ``kind`` | (), str | "tabular" |
| ``P`` | (S, A, S) or (H, S, A, S), float64 | transition probabilities |
| ``r`` | (S, A), (S, A, S), (H, S, A) or (H, S, A, S), float64 | rewards |
| ``d0`` | (S,), float64 | initial-state distribution |
| ``horizon`` | (), int64 | H |
| ``terminal_states`` | (k,), int64 | absorbing states |
| ``name`` | (), str | label, e.g. "icu-sepsis" |
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from privaudit.core.errors import ArtifactError, UsageError
from privaudit.core.atomic import atomic_path
from privaudit.core.npyio import numpy_load_reason
from privaudit.mdp.tabular import TabularMDP

#: Version written by ``save_mdp``; ``load_mdp`` reads only these.
MDP_FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
_KEYS = ("format_version", "kind", "P", "r", "d0", "horizon", "terminal_states", "name")


def is_mdp_file(path: Path) -> bool:
    """True when ``path`` is an ``.npz`` written by :func:`save_mdp` (its ``format_version`` and ``kind``
    entries); reads only the archive's directory, never raises."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":  # not a zip archive (an .npz is one)
                return False
        with np.load(path, allow_pickle=False) as z:
            return {"format_version", "kind"} <= set(z.files)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False


def save_mdp(mdp: TabularMDP, path: str | Path, compress: bool = True) -> Path:
    """Write ``mdp`` to ``path`` (an ``.npz`` file) atomically.

    Parameters
    ----------
    mdp : TabularMDP
    path : path
        Destination; written under a temporary name then renamed, so a
        failed write leaves no partial file.
    compress : bool, default True
        Use ``np.savez_compressed`` (ICU-Sepsis: about 2 MB instead of 200 MB).

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    arrays = {
        "format_version": np.int64(MDP_FORMAT_VERSION),
        "kind": np.array("tabular"),
        "P": mdp.P,
        "r": mdp.r,
        "d0": mdp.d0,
        "horizon": np.int64(mdp.horizon),
        "terminal_states": np.asarray(mdp.terminal_states, dtype=np.int64),
        "name": np.array(mdp.name),
    }
    save = np.savez_compressed if compress else np.savez
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:  # a file object: numpy would append ".npz" to a bare name
            save(f, **arrays)
    return path


def load_mdp(path: str | Path) -> TabularMDP:
    """Read a tabular MDP written by ``save_mdp``.

    Raises
    ------
    ArtifactError
        If the file is missing or not an ``.npz`` archive, lacks a key, has a
        ``format_version`` other than 1, or holds arrays that do not form a
        valid MDP (the message names the file and the key).
    """
    path = Path(path)
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise ArtifactError(f"cannot read MDP file {path}: {numpy_load_reason(e)}. Expected an .npz written by "
                            "`privaudit simulate --mdp-out` or privaudit.mdp.io.save_mdp.") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ArtifactError(f"MDP file {path} is a single .npy array, not an .npz archive.")
    with z:
        missing = [k for k in _KEYS if k not in z.files]
        if "format_version" in missing:
            raise ArtifactError(f"MDP file {path} has no `format_version` key; it was not written "
                                "by privaudit.mdp.io.save_mdp.")
        try:
            version = int(z["format_version"])
        except (TypeError, ValueError):
            raise ArtifactError(f"MDP file {path}: `format_version` must be an integer. "
                                f"Found {z['format_version']!r}.") from None
        if version not in SUPPORTED_VERSIONS:
            raise ArtifactError(f"MDP file {path} has format_version {version}; this privaudit reads "
                                f"versions {list(SUPPORTED_VERSIONS)}. Upgrade privaudit or re-create the file.")
        if missing:
            raise ArtifactError(f"MDP file {path} lacks the keys {missing}.")
        kind = str(z["kind"])
        if kind != "tabular":
            raise ArtifactError(f"MDP file {path}: `kind` must be 'tabular'. Found {kind!r}.")
        try:
            return TabularMDP(P=z["P"], r=z["r"], d0=z["d0"], horizon=int(z["horizon"]),
                              terminal_states=tuple(int(t) for t in z["terminal_states"]),
                              name=str(z["name"]))
        except (UsageError, ValueError, TypeError, IndexError) as e:
            raise ArtifactError(f"MDP file {path} does not hold a valid MDP: {e}") from None
