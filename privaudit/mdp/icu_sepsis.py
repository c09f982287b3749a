"""The ICU-Sepsis benchmark MDP (Choudhary, Gupta & Thomas 2024).

A tabular MDP with S = 716 states and A = 25 actions estimated from real ICU
patients of the MIMIC-III database (AI Clinician cohort, Komorowski et al.
2018). The tables ship in ``sample_data/icu-sepsis/`` (the assets of the PyPI
package ``icu-sepsis`` 2.0.1, MIT licence, see LICENSE.txt there).

States 0-712 are patient states; 713 = death, 714 = survival, 715 = the
absorbing end state. Actions are 5 IV-fluid levels x 5 vasopressor levels
(index = fluid * 5 + vaso). The reward is r(s, a, s') = 1 when s' = 714
(survival) and 0 otherwise, so the value of a policy at horizon H is its
probability of survival within H steps.

Reference values at H = 20 (undiscounted, terminal states absorbing with
reward 0, start state drawn from d_0), from
``sample_data/icu-sepsis/README.md`` and checked by ``tests/mdp/test_mdp.py``:
clinicians 0.6920, optimal 0.7922, uniform 0.6854.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from privaudit.core.package_data import sample_dir
from privaudit.core.errors import ArtifactError, UsageError
from privaudit.core.atomic import atomic_dir
from privaudit.mdp.tabular import TabularMDP

#: Number of states S and actions A of ICU-Sepsis.
N_STATES = 716
N_ACTIONS = 25
#: Terminal states: 713 death, 714 survival, 715 absorbing end state.
TERMINAL_STATES = (713, 714, 715)
#: The survival state; entering it pays reward 1.
SURVIVAL_STATE = 714
#: Exact policy values at H = 20 (4 decimals), from the dataset's README.
REFERENCE_VALUES = {"clinicians": 0.6920, "optimal": 0.7922, "uniform": 0.6854}
#: Horizon at which ``REFERENCE_VALUES`` hold.
REFERENCE_HORIZON = 20

_DEFAULT_DIR = sample_dir() / "icu-sepsis"
_ARRAYS = ("tx_mat", "r_mat", "d_0", "expert_policy", "state_cluster_centers")


def default_data_dir() -> Path:
    """The bundled ``sample_data/icu-sepsis`` folder of the repository."""
    return _DEFAULT_DIR


def cache_dir() -> Path:
    """Where decompressed copies of ``dynamics.npz`` are kept: ``$PRIVAUDIT_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/privaudit``, else ``~/.cache/privaudit``."""
    env = os.environ.get("PRIVAUDIT_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "privaudit"


def _cached(path: Path) -> Path:
    """The cache folder of one ``dynamics.npz``: named by the SHA-256 of its bytes (a changed file is a new entry)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:20]
    return cache_dir() / f"icu-sepsis-{digest}"


def _read_cache(folder: Path) -> dict[str, np.ndarray] | None:
    """The arrays of a complete cache folder, memory-mapped read-only; None when absent or unreadable."""
    try:
        return {k: np.load(folder / f"{k}.npy", mmap_mode="r", allow_pickle=False) for k in _ARRAYS}
    except (OSError, ValueError):
        return None


def _write_cache(folder: Path, tables: dict[str, np.ndarray]) -> None:
    """Write the decompressed arrays (one ``.npy`` each) under a temporary name, then rename; best effort."""
    try:
        with atomic_dir(folder, overwrite=folder.exists()) as tmp:  # replaces a corrupt entry
            for k, a in tables.items():
                np.save(tmp / f"{k}.npy", a, allow_pickle=False)
    except OSError:  # read-only home, full disk, another process wrote it first: the npz serves
        pass


@lru_cache(maxsize=2)
def _read_tables(data_dir: str) -> dict[str, np.ndarray]:
    """Read ``dynamics.npz`` once per folder (arrays are read-only).

    The npz is compressed (1.9 MB for two dense (716, 25, 716) float64
    tables): decompressing it costs about 0.6 s of CPU on every run. The
    first read therefore also writes the decompressed arrays to
    :func:`cache_dir` (a folder named by the SHA-256 of the npz's bytes), and
    later reads memory-map them instead. The cache is a convenience: when it
    cannot be written or read, the npz is read as before. Public data only
    (the benchmark MDP), never anything of the logs.
    """
    path = Path(data_dir) / "dynamics.npz"
    try:
        folder = _cached(path)
        tables = _read_cache(folder)
        if tables is None:
            with np.load(path, allow_pickle=False) as z:
                missing = [k for k in _ARRAYS if k not in z.files]
                if missing:
                    raise ArtifactError(f"{path} lacks the arrays {missing}; expected the icu-sepsis 2.0.1 tables.")
                tables = {k: np.array(z[k], dtype=np.float64) for k in _ARRAYS}
            _write_cache(folder, tables)
    except OSError as e:
        raise ArtifactError(f"cannot read the ICU-Sepsis tables {path}: {e}. "
                            "Pass data_dir= the folder holding dynamics.npz.") from None
    if any(a.dtype != np.float64 for a in tables.values()):
        raise ArtifactError(f"the cached ICU-Sepsis tables of {path} are not float64; remove {folder}.")
    expected = {"tx_mat": (N_STATES, N_ACTIONS, N_STATES), "r_mat": (N_STATES, N_ACTIONS, N_STATES),
                "d_0": (N_STATES,), "expert_policy": (N_STATES, N_ACTIONS),
                "state_cluster_centers": (N_STATES, 47)}
    for k, shape in expected.items():
        if tables[k].shape != shape:
            raise ArtifactError(f"{path}: array `{k}` must have shape {shape}. Found {tables[k].shape}.")
    for a in tables.values():
        if a.flags.writeable:
            a.setflags(write=False)
    return tables


def _tables(data_dir: str | Path | None) -> dict[str, np.ndarray]:
    return _read_tables(str(Path(data_dir).resolve() if data_dir is not None else _DEFAULT_DIR))


def load_icu_sepsis(horizon: int = REFERENCE_HORIZON, data_dir: str | Path | None = None) -> TabularMDP:
    """Load ICU-Sepsis as a stationary finite-horizon TabularMDP.

    Parameters
    ----------
    horizon : int, default 20
        H, the number of steps (the reference values hold at H = 20).
    data_dir : path, optional
        Folder holding ``dynamics.npz``; defaults to the bundled
        ``sample_data/icu-sepsis``.

    Returns
    -------
    TabularMDP
        ``P`` (716, 25, 716) = ``tx_mat``, ``r`` (716, 25, 716) = ``r_mat``
        (1 on entering state 714), ``d0`` (716,) = ``d_0``, terminal states
        (713, 714, 715), ``name`` "icu-sepsis".

    Raises
    ------
    ArtifactError
        If the tables are missing or have unexpected shapes.
    UsageError
        If ``horizon < 1``.

    References
    ----------
    K. Choudhary, D. Gupta, P. S. Thomas, "ICU-Sepsis: A Benchmark MDP Built
    from Real Medical Data", RLC 2024 (package ``icu-sepsis`` 2.0.1).
    """
    t = _tables(data_dir)
    return TabularMDP(P=t["tx_mat"], r=t["r_mat"], d0=t["d_0"], horizon=horizon,
                      terminal_states=TERMINAL_STATES, name="icu-sepsis")


def clinicians_policy(data_dir: str | Path | None = None) -> np.ndarray:
    """The clinicians' (behaviour) policy pi(a | s) of ICU-Sepsis.

    Returns
    -------
    ndarray, shape (716, 25), float64
        ``expert_policy`` of the tables with the all-zero rows of the terminal
        states (713, 714, 715) set to uniform, so every row is a probability
        vector (those rows never affect values: terminal states are absorbing
        with reward 0).
    """
    pi = np.array(_tables(data_dir)["expert_policy"], dtype=np.float64)
    pi[list(TERMINAL_STATES)] = 1.0 / N_ACTIONS
    return pi


def state_cluster_centers(data_dir: str | Path | None = None) -> np.ndarray:
    """Public state features of ICU-Sepsis for linear learners.

    Returns
    -------
    ndarray, shape (716, 47), float64
        47 normalised clinical variables (vitals, labs, SOFA parts) per state:
        the cluster centre that defines each state. It is part of the public
        MDP, not of any patient's log. Read-only copy-free view.
    """
    return _tables(data_dir)["state_cluster_centers"]


def icu_sepsis_spec_doc(horizon: int = REFERENCE_HORIZON, dataset_id: str = "icu-sepsis",
                        description: str | None = None) -> dict:
    """The domain spec document (JSON-ready dict) of logs simulated from ICU-Sepsis.

    Parameters
    ----------
    horizon : int, default 20
        H of the logs.
    dataset_id : str
        Name of the dataset for the budget ledger.
    description : str, optional
        Free text stored in the spec.

    Returns
    -------
    dict
        S = 716, A = 25, H = ``horizon``, terminal states [713, 714, 715],
        reward range [0, 1], a public next-state reward {714: 1.0}, the return
        bound [0, 1] (reward 1 once, on entering the terminal survival state), and the
        privacy unit = one episode (column ``unit_id``, which equals
        ``episode_id`` in simulated logs; max_episodes 1). Valid against
        ``schemas/spec.schema.json``.
    """
    if int(horizon) < 1:
        raise UsageError(f"`horizon` must be >= 1. Got {horizon}.")
    doc = {
        "format_version": 1,
        "dataset_id": dataset_id,
        "description": description or ("Logs of the ICU-Sepsis MDP (Choudhary, Gupta & Thomas 2024; "
                                        "MIT licence), estimated from MIMIC-III."),
        "horizon": int(horizon),
        "n_states": N_STATES,
        "n_actions": N_ACTIONS,
        "terminal_states": list(TERMINAL_STATES),
        "reward_range": [0.0, 1.0],
        "public_reward": {"kind": "next_state", "values": {str(SURVIVAL_STATE): 1.0}},
        # a public fact of the reward definition: reward 1 only on entering the terminal survival
        # state, after which the episode ends, so every return is 0 or 1
        "return_bound": [0.0, 1.0],
        "privacy_unit": {"column": "unit_id", "max_episodes": 1},
    }
    return doc
