"""The policy artifact: a folder with ``policy.parquet`` + ``policy.json``.

``policy.parquet`` has one row per (h, state, action) with non-zero
probability (columns h, state, action, probability); ``policy.json`` is the
manifest, a typed :class:`~privaudit.learners.policy_manifest.PolicyManifest`
(schema ``schemas/policy.schema.json``, checked on write and read):
algorithm, parameters, the privacy record
(:class:`~privaudit.learners.policy_manifest.PolicyPrivacy`: the guarantee
inherited from the release or stated by the learner's own mechanism, or not
private with a note) and the format version. Linear learners may add named arrays (weights w_h,
penalty matrices) in ``extras.parquet`` (columns name, h, i, j, value).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from privaudit import FORMAT_VERSION, __version__
from privaudit.core.errors import ArtifactError, MissingInputError, UsageError
from privaudit.core.atomic import atomic_dir
from privaudit.core.npyio import numpy_load_reason
from privaudit.core.outputs import folder_output, json_output
from privaudit.learners.policy_manifest import POLICY_KIND, PolicyManifest, PolicyPrivacy

#: What ``train --overwrite`` may replace (``privaudit.core.outputs.check_outputs``): an earlier policy folder.
POLICY_OUTPUT = folder_output(f"an earlier policy (a folder whose policy.json has kind {POLICY_KIND!r})",
                              "policy.json", "kind", POLICY_KIND)
#: ... and the private bounding log an earlier policy run wrote beside it (``POLICY.local-log.json``).
POLICY_LOG_OUTPUT = json_output("the private bounding log of an earlier policy (a JSON file with its "
                                "\"policy\" and \"bounding\" keys)",
                                lambda d: {"WARNING", "policy", "bounding"} <= set(d)
                                and str(d["WARNING"]).startswith("PRIVATE"))
#: Largest deviation of a policy row's sum from 1 that is accepted (``load_policy_table``).
ROW_SUM_TOL = 1e-6


@dataclass(frozen=True, repr=False)
class Policy:
    """A learned policy and its manifest.

    Attributes
    ----------
    table : ndarray, shape (H, S, A), float64
        pi_h(a | s); each row sums to 1.
    algorithm : str
        Learner name (``ve``, ``apvi``, ``dp-apvi``, ``pevi``, ...).
    parameters : dict
        The learner's parameters (JSON-serialisable).
    privacy : PolicyPrivacy
        Private or not, the guarantee, the release it came from, a note (a
        dict in the ``policy.json`` form is accepted and converted).
    spec_hash : str or None
        Hash of the domain spec the policy was trained under.
    extras : dict[str, ndarray]
        Extra named arrays of shape (H,), (H, d) or (H, d, d), e.g. linear weights.
    """

    table: np.ndarray
    algorithm: str
    parameters: dict = field(default_factory=dict)
    privacy: PolicyPrivacy = field(default_factory=lambda: PolicyPrivacy(False))
    spec_hash: str | None = None
    stationary: bool = False
    extras: dict = field(default_factory=dict)

    def __post_init__(self):
        t = np.asarray(self.table, dtype=np.float64)
        if t.ndim != 3:
            raise UsageError(f"policy table must have shape (H, S, A). Got {t.shape}.")
        if not np.isfinite(t).all() or (t < -1e-12).any() or np.abs(t.sum(-1) - 1).max() > 1e-6:
            raise UsageError("policy table rows pi_h(. | s) must be probability vectors (finite, >= 0, summing to 1).")
        object.__setattr__(self, "table", t)
        if isinstance(self.privacy, dict):
            object.__setattr__(self, "privacy", PolicyPrivacy.from_dict(self.privacy))
        elif not isinstance(self.privacy, PolicyPrivacy):
            raise UsageError(f"`privacy` must be a PolicyPrivacy. Got {type(self.privacy).__name__}.")

    @property
    def horizon(self) -> int:
        return self.table.shape[0]

    def manifest(self) -> PolicyManifest:
        """The typed ``policy.json`` manifest (``PolicyManifest.to_dict()`` is the document)."""
        H, S, A = self.table.shape
        return PolicyManifest(
            algorithm=self.algorithm, parameters=self.parameters, horizon=H, n_states=S, n_actions=A,
            stationary=bool(self.stationary), spec_hash=self.spec_hash, software_version=__version__,
            created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            extras=tuple(sorted(self.extras)), privacy=self.privacy, format_version=FORMAT_VERSION)

    def __repr__(self) -> str:
        return (f"Policy(algorithm={self.algorithm!r}, shape={self.table.shape}, "
                f"private={self.privacy.private}, extras={sorted(self.extras)})")


def save_policy(policy: Policy, out: str | Path, overwrite: bool = False) -> Path:
    """Write ``policy`` as a folder ``out`` (atomically: temp folder then rename).

    Raises
    ------
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    """
    out = Path(out)
    doc = policy.manifest().to_dict()  # checked against its schema: never write a bad artifact
    h, s, a = np.nonzero(policy.table > 0)
    table = pl.DataFrame({
        "h": h.astype(np.int32), "state": s.astype(np.int32), "action": a.astype(np.int32),
        "probability": policy.table[h, s, a],
    })
    with atomic_dir(out, overwrite=overwrite) as tmp:
        table.write_parquet(tmp / "policy.parquet")
        if policy.extras:
            frames = []
            for name, arr in policy.extras.items():
                arr = np.asarray(arr, dtype=np.float64)
                arr3 = arr.reshape(arr.shape + (1,) * (3 - arr.ndim)) if arr.ndim < 3 else arr
                if arr.ndim > 3:
                    raise UsageError(f"extra array {name!r} must have at most 3 dimensions. Got {arr.shape}.")
                idx = np.indices(arr3.shape).reshape(3, -1)
                frames.append(pl.DataFrame({
                    "name": [name] * idx.shape[1], "ndim": np.full(idx.shape[1], arr.ndim, np.int8),
                    "h": idx[0].astype(np.int32), "i": idx[1].astype(np.int32), "j": idx[2].astype(np.int32),
                    "value": arr3.reshape(-1),
                }))
            pl.concat(frames).write_parquet(tmp / "extras.parquet")
        PolicyManifest.FORMAT.dump(doc, tmp / "policy.json")
    return out


def load_policy(path: str | Path) -> Policy:
    """Read a policy folder written by :func:`save_policy`.

    Raises
    ------
    ArtifactError
        If ``policy.json`` or ``policy.parquet`` is missing or corrupt, the
        manifest breaks its schema, or its ``format_version`` is unknown.
    """
    path = Path(path)
    if not path.exists():
        raise MissingInputError(f"{path}: no such policy folder.")
    man_path = path / "policy.json"
    if not man_path.is_file():
        raise ArtifactError(f"{path} is not a policy folder: {man_path.name} is missing")
    man = PolicyManifest.read(man_path)
    H, S, A = man.shape
    try:
        df = pl.read_parquet(path / "policy.parquet")
    except Exception as e:  # noqa: BLE001 - any read failure is a corrupt artifact
        raise ArtifactError(f"cannot read {path / 'policy.parquet'}: {e}") from None
    table = np.zeros((H, S, A))
    h, s, a = (df[c].to_numpy() for c in ("h", "state", "action"))
    if len(df) and (h.max() >= H or s.max() >= S or a.max() >= A or min(h.min(), s.min(), a.min()) < 0):
        raise ArtifactError(f"{path / 'policy.parquet'} has (h, state, action) outside ({H}, {S}, {A})")
    table[h, s, a] = df["probability"].to_numpy()
    extras = {}
    if man.extras:
        ex = pl.read_parquet(path / "extras.parquet")
        for name in man.extras:
            part = ex.filter(pl.col("name") == name)
            ndim = int(part["ndim"][0])
            shape3 = (part["h"].max() + 1, part["i"].max() + 1, part["j"].max() + 1)
            arr = np.zeros(shape3)
            arr[part["h"].to_numpy(), part["i"].to_numpy(), part["j"].to_numpy()] = part["value"].to_numpy()
            extras[name] = arr.reshape(shape3[:ndim])
    try:
        return Policy(table=table, algorithm=man.algorithm, parameters=man.parameters, privacy=man.privacy,
                      spec_hash=man.spec_hash, stationary=man.stationary, extras=extras)
    except UsageError as e:
        raise ArtifactError(f"{path}: {e}") from None


def greedy_table(Q: np.ndarray) -> np.ndarray:
    """One-hot greedy policy argmax_a Q_h(s, a) (ties to the lowest action).

    Parameters
    ----------
    Q : ndarray, shape (H, S, A)

    Returns
    -------
    ndarray, shape (H, S, A)
    """
    best = Q.argmax(-1)
    pi = np.zeros(Q.shape)
    np.put_along_axis(pi, best[..., None], 1.0, axis=-1)
    return pi


def load_policy_table(path: str | Path, S: int, A: int, H: int, domain: str = "the MDP") -> np.ndarray:
    """Read a policy file as a table pi_h(a | s).

    Parameters
    ----------
    path : path
        A policy folder written by ``privaudit train`` (``policy.json`` +
        ``policy.parquet``, read by ``privaudit.learners.policy.load_policy``,
        which checks its format version), or a ``.npy`` array of shape
        (H, S, A) (per step) or (S, A) (stationary).
    S, A, H : int
        The MDP's (or spec's) numbers of states, actions and steps.
    domain : str
        What S, A, H come from, in a shape error ("the MDP", or "the spec" when no MDP is given).

    Returns
    -------
    ndarray, shape (H, S, A), float64
        Non-negative rows summing to 1 (a stationary table is repeated over h).

    Raises
    ------
    ArtifactError
        If the file is missing or not a ``.npy`` array (or a policy folder
        that ``load_policy`` refuses), has another shape,
        holds NaN/inf or negative entries, or a row whose sum is not 1 (the
        message names the first offending (h, s)).
    """
    path = Path(path)
    if path.is_dir():
        table = load_policy(path).table
        if table.shape != (H, S, A):
            raise ArtifactError(f"policy {path} has shape {table.shape}; {domain} needs ({H}, {S}, {A}) "
                                f"(H={H}, S={S}, A={A}). Train it under {domain}'s domain (and horizon).")
        return table
    if not path.exists():
        raise MissingInputError(f"{path}: no such policy file or folder. Expected a policy folder written by "
                                f"`privaudit train` or a .npy array of shape ({H}, {S}, {A}) or ({S}, {A}).")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ArtifactError(f"cannot read policy {path}: {numpy_load_reason(e)}. Expected a .npy array of shape "
                            f"({H}, {S}, {A}) or ({S}, {A}).") from None
    if not isinstance(arr, np.ndarray):
        arr.close()
        raise ArtifactError(f"policy {path} is an .npz archive; expected a single .npy array of shape "
                            f"({H}, {S}, {A}) or ({S}, {A}).")
    if arr.shape not in ((H, S, A), (S, A)):
        raise ArtifactError(f"policy {path} has shape {arr.shape}; {domain} needs ({H}, {S}, {A}) "
                            f"or ({S}, {A}) (H={H}, S={S}, A={A}).")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ArtifactError(f"policy {path} has dtype {arr.dtype}; expected real numbers.")
    pi = np.broadcast_to(arr.astype(np.float64), (H, S, A)).copy()
    bad = ~np.isfinite(pi).all(-1) | (pi < 0).any(-1) | (np.abs(pi.sum(-1) - 1.0) > ROW_SUM_TOL)
    if bad.any():
        h, s = np.argwhere(bad)[0]
        where = f"step h={h}, state s={s}" if arr.ndim == 3 else f"state s={s}"
        rows = bad if arr.ndim == 3 else bad[0]  # the file's rows, not the H copies of an (S, A) table
        raise ArtifactError(f"policy {path}: row pi(. | {where}) = {pi[h, s].tolist()} is not a probability "
                            f"vector (finite, >= 0, summing to 1 within {ROW_SUM_TOL}); "
                            f"{int(rows.sum())} bad row{'s' if rows.sum() != 1 else ''} of {rows.size} in all.")
    return pi
