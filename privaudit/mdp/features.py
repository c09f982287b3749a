"""Feature maps phi(s, a) in R^d for linear-MDP learners, with ||phi|| <= 1 enforced.

The privacy sensitivities of DP-VAPVI (Qiao & Wang (2023), Section 4; docs/linear.md) hold only when
every feature vector has Euclidean norm at most 1. Each map here enforces it in
one of two ways, recorded in ``FeatureMap.norm`` and in the policy manifest:

* ``rescale``: divide every vector by one public constant c >= max ||phi||
  (the linear MDP is unchanged: nu_h, theta_h are multiplied by c);
* ``clip``: phi <- phi / max(1, ||phi||) per vector (changes the features of
  the long vectors only).

Built-in maps over finite states (all expose the full table of shape (S, A, d)):

* ``one-hot``: tabular as linear, d = S*A, phi(s, a) = e_{s*A + a}.
* ``synthetic-linear``: the map of Qiao & Wang's (2023) evaluation MDP (docs/mdp.md, "The
  synthetic linear MDP"), (binary(a), delta(s, a), 1 - delta(s, a)) scaled by the public 1/3.
* ``state-table-x-action``: x(s) (x) e_a where x(s) is a row of a public
  state-feature table (e.g. ICU-Sepsis's 47 clinical variables), standardised
  with the table's own (public) column means and deviations, optionally reduced
  by a public, data-independent Gaussian random projection (seed from the
  spec), with a constant 1 appended; d = (m + 1) * A.

Only public facts enter a map: the spec and public tables, never the logs.
The map a spec names is built by ``privaudit.mdp.spec_features.feature_map_from_spec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.core.spec import StateActionSizes

#: Largest feature dimension accepted (the learners hold several d x d matrices per step).
MAX_DIM = 4096
#: Largest S*A*d table materialised in memory (float64 entries, 400 MB).
MAX_TABLE_ENTRIES = 50_000_000
#: Slack allowed on ||phi|| <= 1 for rounding (never used to relax a sensitivity:
#: vectors are renormalised, see ``enforce_norm``).
_NORM_TOL = 1e-12


def enforce_norm(table: np.ndarray, mode: str, scale: float | None = None) -> tuple[np.ndarray, float]:
    """Return a copy of ``table`` with every vector of Euclidean norm <= 1.

    Parameters
    ----------
    table : ndarray, shape (..., d)
        Feature vectors along the last axis.
    mode : {"rescale", "clip"}
        ``rescale`` divides all vectors by the public constant ``scale`` (or,
        when None, by the largest norm in ``table``, which must itself be
        public: a public table, never private logs); ``clip`` divides each
        vector by max(1, ||phi||).
    scale : float, optional
        Public constant c >= max ||phi|| for ``rescale``.

    Returns
    -------
    table : ndarray, shape (..., d)
    scale : float
        The divisor used by ``rescale`` (1.0 for ``clip``).

    Raises
    ------
    UsageError
        If ``mode`` is unknown, ``scale`` <= 0 or smaller than a norm in the table.
    """
    t = np.array(table, dtype=np.float64)
    norms = np.linalg.norm(t, axis=-1)
    if mode == "rescale":
        c = float(norms.max()) if scale is None else float(scale)
        if c <= 0 and scale is not None:
            raise UsageError(f"feature `scale` must be > 0. Got {scale}.")
        c = max(c, 1.0) if scale is None else c
        if norms.max() > c * (1 + 1e-9):
            raise UsageError(f"feature rescale constant {c} is below the largest feature norm "
                             f"{norms.max():.6g}; use a larger constant or norm='clip'.")
        t /= c
    elif mode == "clip":
        c = 1.0
        t /= np.maximum(1.0, norms)[..., None]
    else:
        raise UsageError(f"feature `norm` must be 'rescale' or 'clip'. Got {mode!r}.")
    # exact guarantee despite rounding: renormalise any vector a hair above 1
    n2 = np.linalg.norm(t, axis=-1)
    over = n2 > 1.0
    if over.any():
        t[over] /= (n2[over] * (1 + _NORM_TOL))[:, None]
    return t, c


@dataclass(frozen=True, repr=False)
class FeatureMap(StateActionSizes):
    """A feature map over finite states: phi(s, a) = ``table[s, a]``.

    Attributes
    ----------
    table : ndarray, shape (S, A, d), float64
        phi(s, a) with ||phi(s, a)||_2 <= 1 for every (s, a) (checked).
    name : str
        ``one-hot``, ``synthetic-linear``, ``state-table-x-action``.
    norm : str
        How ||phi|| <= 1 was enforced: ``rescale`` or ``clip``.
    scale : float
        The public rescale divisor (1.0 for ``clip``).
    settings : dict
        The public settings that rebuild the map (JSON-ready), recorded in
        the policy manifest.

    Raises
    ------
    UsageError
        If the table is not 3-d, d > ``MAX_DIM``, or some ||phi|| > 1.
    """

    table: np.ndarray
    name: str
    norm: str = "rescale"
    scale: float = 1.0
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        t = np.asarray(self.table, dtype=np.float64)
        if t.ndim != 3:
            raise UsageError(f"feature table must have shape (S, A, d). Got {t.shape}.")
        if t.shape[2] > MAX_DIM:
            raise UsageError(f"feature dimension d = {t.shape[2]} exceeds {MAX_DIM}; reduce it "
                             "(projection_dim) or use a smaller map.")
        if np.linalg.norm(t, axis=-1).max() > 1.0:
            raise UsageError("every feature vector must have ||phi(s, a)|| <= 1 (use enforce_norm).")
        t.setflags(write=False)
        object.__setattr__(self, "table", t)

    def _sizes(self) -> tuple:
        return self.table.shape[:2]

    @property
    def dim(self) -> int:
        """d."""
        return self.table.shape[2]

    def phi(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
        """phi(s, a) for arrays of states and actions, shape (n, d)."""
        return self.table[np.asarray(s), np.asarray(a)]

    def manifest(self) -> dict:
        """Public description for the policy manifest."""
        return {"map": self.name, "dim": self.dim, "norm": self.norm, "scale": self.scale, **self.settings}

    def __repr__(self) -> str:
        return f"FeatureMap({self.name!r}, S={self.n_states}, A={self.n_actions}, d={self.dim}, norm={self.norm!r})"


def one_hot_features(n_states: int, n_actions: int) -> FeatureMap:
    """Tabular MDP as a linear MDP: phi(s, a) = e_{s*A + a}, d = S*A, ||phi|| = 1.

    Raises
    ------
    UsageError
        If S*A > ``MAX_DIM``.
    """
    S, A = int(n_states), int(n_actions)
    d = S * A
    if d > MAX_DIM:
        raise UsageError(f"one-hot features need d = S*A = {d} <= {MAX_DIM}; use state-table-x-action.")
    table = np.eye(d).reshape(S, A, d)
    return FeatureMap(table, "one-hot", "rescale", 1.0, {})


def state_table_x_action(state_table: np.ndarray, n_actions: int, *, projection_dim: int | None = None,
                         projection_seed: int = 0, norm: str = "rescale", standardise: bool = True,
                         bias: bool = True) -> FeatureMap:
    """phi(s, a) = x(s) (x) e_a from a public state-feature table.

    Parameters
    ----------
    state_table : ndarray, shape (S, m)
        Public state features (e.g. ICU-Sepsis ``state_cluster_centers``, (716, 47)).
    n_actions : int
        A.
    projection_dim : int, optional
        p < m: multiply the standardised table by a public Gaussian matrix
        R of shape (m, p), R_ij ~ N(0, 1/p), drawn from
        ``np.random.default_rng(projection_seed)`` (data-independent; the seed
        is a public setting, not a noise seed).
    projection_seed : int
        Seed of R.
    norm : {"rescale", "clip"}
        ``rescale`` divides by the largest row norm of the public table.
    standardise : bool
        Centre and scale each column by the public table's own mean and
        standard deviation (columns with zero deviation are left centred).
    bias : bool
        Append a constant 1 to x(s) before normalising (an intercept per action).

    Returns
    -------
    FeatureMap
        d = (p or m) + bias, times A.

    Raises
    ------
    UsageError
        If the table is not 2-d or not finite, or p is not in [1, m].
    """
    X = np.asarray(state_table, dtype=np.float64)
    if X.ndim != 2 or not np.isfinite(X).all():
        raise UsageError(f"state feature table must be a finite (S, m) array. Got shape {X.shape}.")
    S, m = X.shape
    A = int(n_actions)
    if standardise:
        sd = X.std(0)
        X = (X - X.mean(0)) / np.where(sd > 0, sd, 1.0)
    if projection_dim is not None:
        p = int(projection_dim)
        if not 1 <= p <= m:
            raise UsageError(f"`projection_dim` must lie in [1, {m}]. Got {projection_dim}.")
        R = np.random.default_rng(int(projection_seed)).normal(0.0, 1.0 / np.sqrt(p), size=(m, p))
        X = X @ R
    if bias:
        X = np.hstack([X, np.ones((S, 1))])
    X, scale = enforce_norm(X, norm)
    k = X.shape[1]
    if k * A > MAX_DIM or S * A * k * A > MAX_TABLE_ENTRIES:
        raise UsageError(f"state-table-x-action gives d = {k * A}; reduce projection_dim.")
    table = np.zeros((S, A, k * A))
    for a in range(A):  # block a of phi(s, a) holds x(s); A is small, the state axis is vectorized
        table[:, a, a * k:(a + 1) * k] = X
    settings = {"projection_dim": projection_dim, "projection_seed": int(projection_seed),
                "standardise": bool(standardise), "bias": bool(bias), "state_dim": int(m)}
    return FeatureMap(table, "state-table-x-action", norm, float(scale), settings)
