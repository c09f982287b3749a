"""Simulate logs from a tabular MDP, vectorized over episodes.

The output is a polars DataFrame in privaudit's standard trajectory schema
(docs/data-format.md, "The trajectory table"), one row per step, sorted by
(episode_id, step):

| column | dtype | meaning |
|---|---|---|
| episode_id | Int64 | 0..n-1 |
| step | Int32 | h = 0..H-1 (the papers' h = 1..H shifted by one) |
| state | Int32 | s_h |
| action | Int32 | a_h ~ pi_h(. \\| s_h) |
| reward | Float64 | realized reward r(s_h, a_h, s_{h+1}) (or r(s_h, a_h)) |
| next_state | Int32 | s_{h+1} ~ P_h(. \\| s_h, a_h) |
| terminated | Boolean | True on the row whose next_state is terminal |
| truncated | Boolean | True on the last row of an episode stopped by H |
| unit_id | Int64 | privacy unit = the episode (equals episode_id) |

Sampling: categorical draws by inverse CDF, one uniform draw per live
episode per draw, all live episodes of a step at once (only h is looped).
Each row of a probability table becomes a cumulative sum offset by its row
index, ``row + cumsum(p_row)``, and ``np.searchsorted`` on the flattened,
globally sorted array finds every episode's outcome in one call. The offset
costs floating-point resolution: outcomes whose probability is below about
``R * 2**-52`` (R = number of rows, e.g. 4e-12 for ICU-Sepsis) may merge with
a neighbour; zero-probability outcomes are never drawn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from privaudit.core.errors import UsageError
from privaudit.core.atomic import atomic_path
from privaudit.core.outputs import MARK_KEY
from privaudit.mdp.registry import MDP_REGISTRY
from privaudit.mdp.tabular import TabularMDP, _check_policy

#: The mark of simulated logs (``privaudit.core.outputs.MARK_KEY`` in the Parquet key-value metadata).
SIMULATED_LOGS_MARK = "simulate-logs"

#: Seed of the public random base policy that ``mix:W`` mixes with uniform on
#: MDPs other than ICU-Sepsis (a fixed, documented constant, not a noise seed).
BASE_POLICY_SEED = 20240601

#: Standard column order of simulated logs.
LOG_COLUMNS = ("episode_id", "step", "state", "action", "reward", "next_state",
               "terminated", "truncated", "unit_id")


class _RowSampler:
    """Inverse-CDF sampler for many categorical rows at once.

    Parameters
    ----------
    p : ndarray, shape (R, K)
        R probability rows over K outcomes.
    """

    def __init__(self, p: np.ndarray):
        p = np.asarray(p, dtype=np.float64)
        R, K = p.shape
        cdf = np.cumsum(p, axis=1)
        cdf /= cdf[:, -1:]
        cdf[:, -1] = 1.0
        cdf += np.arange(R, dtype=np.float64)[:, None]  # row r lives in [r, r + 1]
        self._keys = cdf.ravel()
        self._K = K
        # last outcome with positive probability per row: the guard for u that rounds up to 1
        self._last = (K - 1 - np.argmax(p[:, ::-1] > 0, axis=1)).astype(np.int64)

    def sample(self, rows: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Outcome index per requested row, shape (m,), for uniforms ``u`` in [0, 1)."""
        rows = rows.astype(np.int64, copy=False)
        idx = np.searchsorted(self._keys, rows + u, side="right") - rows * self._K
        return np.minimum(idx, self._last[rows])


def simulate(mdp: TabularMDP, policy: np.ndarray, n_episodes: int, rng: np.random.Generator) -> pl.DataFrame:
    """Roll out ``n_episodes`` episodes of ``policy`` in ``mdp``.

    Parameters
    ----------
    mdp : TabularMDP
        Terminal states are absorbing: an episode stops on entering one.
    policy : ndarray, shape (S, A) or (H, S, A)
        Behaviour policy pi_h(a | s); rows are probability vectors.
    n_episodes : int
        n >= 1.
    rng : numpy.random.Generator
        Source of all randomness; the same generator state gives the same
        table (and, written with ``write_logs``, the same bytes).

    Returns
    -------
    polars.DataFrame
        The standard trajectory schema (module docstring), sorted by
        (episode_id, step). Episodes start at s_0 ~ d0 and stop at a terminal
        state (``terminated`` on that row) or after H steps (``truncated`` on
        the last row when no terminal state was reached).

    Raises
    ------
    UsageError
        If ``n_episodes < 1``, the policy's shape or rows are invalid, or d0
        puts mass on a terminal state (such episodes would have no step).

    Notes
    -----
    Rewards are realized: r(s, a, s') when the MDP has an (S, A, S) or
    (H, S, A, S) reward (ICU-Sepsis: 1 on entering state 714), else r_h(s, a).
    Time and memory: one (S*A*S,) float64 CDF per distinct P_h (102 MB for
    ICU-Sepsis) plus O(n * H) for the output.
    """
    pi = _check_policy(mdp, policy)
    n = int(n_episodes)
    if n < 1:
        raise UsageError(f"`n_episodes` must be >= 1. Got {n_episodes}.")
    S, A, H = mdp.n_states, mdp.n_actions, mdp.horizon
    is_terminal = np.zeros(S, dtype=bool)
    is_terminal[list(mdp.terminal_states)] = True
    if mdp.d0[is_terminal].sum() > 0:
        raise UsageError(f"d0 puts probability {mdp.d0[is_terminal].sum():.3g} on terminal states "
                         f"{list(np.flatnonzero(is_terminal & (mdp.d0 > 0)))}; episodes must start "
                         "in a non-terminal state.")
    r = mdp.r
    r_next = mdp.reward_next_state  # TabularMDP's reading (H = S = A makes the shape ambiguous)
    r_steps = r.ndim == (4 if r_next else 3)

    # Samplers: one per distinct P_h / pi_h (stationary tables are built once).
    trans = {}
    acts = {}

    def trans_at(h):
        key = 0 if mdp.P.ndim == 3 else h
        if key not in trans:
            trans.clear()
            trans[key] = _RowSampler(mdp.transition(h).reshape(S * A, S))
        return trans[key]

    def act_at(h):
        key = 0 if pi.ndim == 2 else h
        if key not in acts:
            acts.clear()
            acts[key] = _RowSampler(pi if pi.ndim == 2 else pi[h])
        return acts[key]

    live = np.arange(n, dtype=np.int64)                       # episodes still running
    cur = _RowSampler(mdp.d0[None, :]).sample(np.zeros(n, dtype=np.int64), rng.random(n))
    chunks = []                                               # per step h: (ids, s, a, r, s', term)
    for h in range(H):                                        # loop over steps only
        m = live.size
        if m == 0:
            break
        a = act_at(h).sample(cur, rng.random(m))
        s2 = trans_at(h).sample(cur * A + a, rng.random(m))
        rh = r[h] if r_steps else r
        rew = rh[cur, a, s2] if r_next else rh[cur, a]
        term = is_terminal[s2]
        chunks.append((live, cur, a, rew, s2, term))
        keep = ~term
        live, cur = live[keep], s2[keep]

    # Scatter step-major chunks into episode-major rows: row of (e, h) = offset[e] + h.
    length = np.zeros(n, dtype=np.int64)
    for ids, *_ in chunks:
        length[ids] += 1
    offset = np.concatenate(([0], np.cumsum(length)[:-1]))
    N = int(length.sum())
    cols = {
        "episode_id": np.empty(N, np.int64), "step": np.empty(N, np.int32),
        "state": np.empty(N, np.int32), "action": np.empty(N, np.int32),
        "reward": np.empty(N, np.float64), "next_state": np.empty(N, np.int32),
        "terminated": np.empty(N, bool), "truncated": np.zeros(N, bool),
    }
    for h, (ids, s, a, rew, s2, term) in enumerate(chunks):
        pos = offset[ids] + h
        cols["episode_id"][pos] = ids
        cols["step"][pos] = h
        cols["state"][pos] = s
        cols["action"][pos] = a
        cols["reward"][pos] = rew
        cols["next_state"][pos] = s2
        cols["terminated"][pos] = term
        if h == H - 1:
            cols["truncated"][pos] = ~term
    cols["unit_id"] = cols["episode_id"].copy()
    return pl.DataFrame({k: cols[k] for k in LOG_COLUMNS})


def write_logs(df: pl.DataFrame, path: str | Path) -> Path:
    """Write a log table to one Parquet file atomically (zstd, deterministic bytes).

    The same table gives the same bytes with the same polars version. The file is marked as simulated
    (key-value metadata ``privaudit_kind: simulate-logs``): ``simulate --overwrite`` replaces only such
    a file (:func:`is_simulated_logs`), never someone's own logs.
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        df.write_parquet(tmp, compression="zstd", compression_level=9, statistics=True,
                         metadata={MARK_KEY: SIMULATED_LOGS_MARK})
    return path


def is_simulated_logs(path: Path) -> bool:
    """True when ``path`` is a Parquet file written by :func:`write_logs` (its mark); never raises."""
    try:
        return pl.read_parquet_metadata(path).get(MARK_KEY) == SIMULATED_LOGS_MARK
    except (OSError, pl.exceptions.PolarsError):
        return False


def uniform_policy(mdp: TabularMDP) -> np.ndarray:
    """pi(a | s) = 1/A, shape (S, A)."""
    return np.full((mdp.n_states, mdp.n_actions), 1.0 / mdp.n_actions)


def random_base_policy(n_states: int, n_actions: int, seed: int = BASE_POLICY_SEED) -> np.ndarray:
    """A fixed random stationary policy: rows ~ Dirichlet(1_A), shape (S, A).

    Public and data-independent; ``seed`` names the policy (default
    ``BASE_POLICY_SEED``). Used as the base of ``mix:W`` on MDPs other than
    ICU-Sepsis.
    """
    return np.random.default_rng(seed).dirichlet(np.ones(n_actions), size=n_states)


def behaviour_policy(name: str, mdp: TabularMDP, entry=None) -> np.ndarray:
    """The behaviour policy called ``name`` for ``mdp``.

    Parameters
    ----------
    name : str
        ``uniform``; ``mix:W`` with 0 <= W <= 1, meaning W * uniform +
        (1 - W) * base; or a behaviour named by the MDP's registry entry
        (ICU-Sepsis: ``clinicians``). The base of ``mix:W`` is the entry's
        ``mix_base`` (ICU-Sepsis: the clinicians' policy) or, when it has
        none, the fixed random policy ``random_base_policy(S, A)``
        (Dirichlet(1) rows, seed ``BASE_POLICY_SEED``).
    mdp : TabularMDP
    entry : privaudit.mdp.registry.MDPEntry, optional
        The MDP's registry entry; default ``MDP_REGISTRY.get(mdp.name)``.

    Returns
    -------
    ndarray, shape (S, A) or (H, S, A)
        A stochastic policy (stationary unless a named behaviour is per-step).

    Raises
    ------
    UsageError
        For a name the MDP does not define (e.g. ``clinicians`` on
        random-tabular), or W outside [0, 1].
    """
    if entry is None:
        entry = MDP_REGISTRY.get(mdp.name)
    named = dict(entry.behaviours) if entry is not None else {}
    mix_base = entry.mix_base if entry is not None else None
    if name == "uniform":
        return uniform_policy(mdp)
    if name in named:
        return np.asarray(named[name](mdp), dtype=np.float64)
    if name.startswith("mix:"):
        try:
            w = float(name[4:])
        except ValueError:
            w = float("nan")
        if not 0.0 <= w <= 1.0:
            raise UsageError(f"behaviour `{name}`: W in mix:W must be a number in [0, 1], e.g. mix:0.3.")
        base = (named[mix_base](mdp) if mix_base is not None
                else random_base_policy(mdp.n_states, mdp.n_actions))
        return w * uniform_policy(mdp) + (1.0 - w) * np.asarray(base, dtype=np.float64)
    choices = ", ".join(["uniform", "mix:W (0 <= W <= 1)", *named])
    raise UsageError(f"behaviour {name!r} is not defined for the {mdp.name} MDP; choose one of: {choices}.")
