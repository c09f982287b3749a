"""Episodic environments whose users are deterministic response trees.

Online exploration under joint DP (docs/online.md): an agent meets
a stream of users k = 0, 1, ..., one episode each. A user's *data* is her
whole response tree: her initial state and her response (reward, next state)
to every possible action sequence (Ngo, Vietri & Wu 2022, their definition
of JDP: a user is a depth-H tree of responses). Here that tree is a
pure function of the user's 128-bit key, computed on demand by a
counter-based generator (numpy's Philox4x64-10):

* initial state: from the Philox block at counter (0, 0, 0, 0) under
  key = user key, word 0 -> a uniform u in [0, 1) -> inverse CDF of d0;
* step h (0-based) after actions a_0..a_h: the block at counter
  (h + 1, a_h, c_2, c_3) where (c_2, c_3) are words 2 and 3 of the block of the
  previous step (or of the initial block). Word 0 -> next state by the inverse
  CDF of P_h(. | s_h, a_h); words 2, 3 chain on. So the block of step h is a
  function of (user key, h, a_0..a_h): a hash chain over the action history
  (two different histories collide with probability about 2^-128).

The state path is itself a function of the actions, so the response to any
action sequence is fixed before the agent acts: two runs that differ only in
one user's key are an exact neighbouring pair (one user's whole data
replaced), whatever the agent does differently after that user.

User k's default key is (world_key, k); :meth:`EpisodicEnv.with_user_key`
replaces one user's key. Rewards are deterministic given (h, s, a, s'):
r(s, a, s') when the MDP has per-transition rewards (ICU-Sepsis), else the
expected reward r_h(s, a). They must lie in [0, 1] (the private counters'
sensitivity assumes it).

Steps are 0-based (h = 0..H-1; the papers write 1..H). Numpy's Philox
increments its counter before producing a block, so "the block at counter c"
is Philox4x64-10 applied to c + 1 (little-endian over the four words); only
determinism matters here.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.core.spec import DelegatedSizes
from privaudit.mdp.features import FeatureMap
from privaudit.mdp.icu_sepsis import load_icu_sepsis
from privaudit.mdp.io import load_mdp
from privaudit.mdp.random_tabular import random_tabular_mdp
from privaudit.mdp.riverswim import riverswim_mdp
from privaudit.mdp.synthetic_linear import synthetic_linear_features, synthetic_linear_mdp
from privaudit.mdp.tabular import TabularMDP
from privaudit.online.rollout import play
from privaudit.release.size import physical_memory_bytes

#: Environment names accepted by :func:`make_env` (besides a path to an MDP .npz).
ENV_NAMES = ("riverswim", "random-tabular", "icu-sepsis", "synthetic-linear")
#: Defaults of the size options per environment (None: not applicable).
ENV_DEFAULTS = {
    "riverswim": {"horizon": 20, "states": 6, "actions": None, "instance_seed": None},
    "random-tabular": {"horizon": 10, "states": 10, "actions": 5, "instance_seed": 0},
    "icu-sepsis": {"horizon": 20, "states": None, "actions": None, "instance_seed": None},
    "synthetic-linear": {"horizon": 20, "states": None, "actions": None, "instance_seed": 0},
}
_U64 = np.uint64
_TWO_M53 = 2.0 ** -53
#: ``rollout`` keeps the CDF and reward tables as Python lists (bisect) when each has at most this many entries.
_LIST_TABLES_MAX = 1 << 18
_REWARD_TOL = 1e-12


def _key_array(key) -> np.ndarray:
    """A user key as a (2,) uint64 array; accepts an int in [0, 2^128) or a pair."""
    if isinstance(key, (int, np.integer)):
        k = int(key)
        if not 0 <= k < 2 ** 128:
            raise UsageError(f"a user key must be an integer in [0, 2^128). Got {key}.")
        return np.array([k & (2 ** 64 - 1), k >> 64], dtype=_U64)
    arr = np.asarray(key)
    if arr.shape != (2,) or not np.issubdtype(arr.dtype, np.integer) or (arr < 0).any():
        raise UsageError(f"a user key must be an int or a pair of non-negative 64-bit ints. Got {key!r}.")
    return arr.astype(_U64)


class _Philox:
    """The Philox4x64-10 block at (key, counter), through one reusable numpy bit generator."""

    def __init__(self):
        self._bg = np.random.Philox(key=np.zeros(2, dtype=_U64))
        self._state = self._bg.state
        self._state["buffer_pos"] = 4  # empty buffer: the next random_raw computes a new block

    def block(self, key: np.ndarray, counter: np.ndarray) -> np.ndarray:
        """Four uint64 words, a pure function of ``key`` (2,) and ``counter`` (4,)."""
        st = self._state
        st["state"] = {"counter": counter, "key": key}
        self._bg.state = st
        return self._bg.random_raw(4)


@dataclass(frozen=True, repr=False)
class EpisodicEnv(DelegatedSizes):
    """A known tabular MDP whose users are response trees keyed by (world_key, k).

    Attributes
    ----------
    mdp : TabularMDP
        The MDP (P, r, d0, H); used for sampling and for exact regret.
    world_key : int
        Default key of user k is (world_key, k); 0 <= world_key < 2^64.
    features : FeatureMap or None
        The public feature map phi(s, a) (table (S, A, d), ||phi|| <= 1) when
        the MDP has one (synthetic-linear), for linear agents.
    user_keys : dict
        Keys that replace the default key of some users: k -> (2,) uint64.
    name : str
        Label for manifests.

    Notes
    -----
    The object is immutable except for the position of the current episode
    (:meth:`reset`, :meth:`step`), which lives in a private mutable slot.
    """

    mdp: TabularMDP
    world_key: int = 0
    features: FeatureMap | None = None
    user_keys: dict = field(default_factory=dict)
    name: str = ""
    _cdf: np.ndarray = field(init=False, compare=False)
    _rew: np.ndarray = field(init=False, compare=False)
    _d0cdf: np.ndarray = field(init=False, compare=False)
    _run: dict = field(init=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.mdp, TabularMDP):
            raise UsageError(f"`mdp` must be a TabularMDP. Got {type(self.mdp).__name__}.")
        if not (isinstance(self.world_key, (int, np.integer)) and 0 <= int(self.world_key) < 2 ** 64):
            raise UsageError(f"`world_key` must be an integer in [0, 2^64). Got {self.world_key!r}.")
        mdp = self.mdp
        H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
        if self.features is not None and self.features.table.shape[:2] != (S, A):
            raise UsageError(f"the feature table has shape {self.features.table.shape}; the MDP needs "
                             f"({S}, {A}, d).")
        steps = range(H) if mdp.P.ndim == 4 else [0]
        P = np.stack([mdp.transition(h) for h in steps])  # (H or 1, S, A, S), terminals absorbing
        cdf = np.cumsum(P, axis=-1)
        cdf /= cdf[..., -1:]  # exact 1.0 at the end; zero-probability states are never drawn
        # realised reward: r(s, a, s') when the MDP has it (terminal rows 0), else r_h(s, a)
        r = np.asarray(mdp.r, dtype=np.float64)
        if mdp.reward_next_state:  # TabularMDP's reading of r (H = S = A makes the shape ambiguous)
            rew = np.array(r if r.ndim == 4 else r[None], dtype=np.float64)
            if mdp.terminal_states:
                rew[:, list(mdp.terminal_states)] = 0.0
        else:
            rew = np.stack([mdp.expected_reward(h) for h in range(H)])  # (H, S, A)
            if (rew == rew[:1]).all():
                rew = rew[:1]
        if not np.isfinite(rew).all() or rew.min() < -_REWARD_TOL or rew.max() > 1 + _REWARD_TOL:
            raise UsageError(f"the rewards of MDP {mdp.name!r} span [{rew.min():.4g}, {rew.max():.4g}]; online "
                             "agents need rewards in [0, 1] (their counters' sensitivity assumes it). "
                             "Rescale the MDP's rewards.")
        rew = np.clip(rew, 0.0, 1.0)
        d0cdf = np.cumsum(mdp.d0)
        d0cdf /= d0cdf[-1]
        object.__setattr__(self, "world_key", int(self.world_key))
        object.__setattr__(self, "user_keys", {int(k): _key_array(v) for k, v in self.user_keys.items()})
        object.__setattr__(self, "_cdf", cdf)
        object.__setattr__(self, "_rew", rew)
        object.__setattr__(self, "_d0cdf", d0cdf)
        object.__setattr__(self, "_run", {"philox": _Philox(), "h": None, "ctr": np.zeros(4, dtype=_U64),
                                          "H": H, "S": S, "A": A, "cdf_steps": cdf.shape[0] > 1,
                                          "rew_steps": rew.shape[0] > 1, "rew_next": rew.ndim == 4})

    # -- public facts ------------------------------------------------------
    def _domain(self) -> TabularMDP:
        return self.mdp

    @property
    def phi(self) -> np.ndarray | None:
        """The public feature table phi, shape (S, A, d), or None."""
        return None if self.features is None else self.features.table

    def __repr__(self) -> str:
        d = "" if self.features is None else f", d={self.features.table.shape[-1]}"
        return (f"EpisodicEnv(name={self.name or self.mdp.name!r}, H={self.horizon}, S={self.n_states}, "
                f"A={self.n_actions}{d}, replaced_users={len(self.user_keys)})")

    # -- users ---------------------------------------------------------------
    def user_key(self, k: int) -> np.ndarray:
        """User ``k``'s key, shape (2,) uint64: (world_key, k) unless replaced."""
        k = int(k)
        if k < 0:
            raise UsageError(f"user index must be >= 0. Got {k}.")
        got = self.user_keys.get(k)
        return got if got is not None else np.array([self.world_key, k], dtype=_U64)

    def with_user_key(self, k: int, key) -> "EpisodicEnv":
        """A copy in which user ``k``'s key is ``key`` (int < 2^128 or a uint64 pair).

        The copy and ``self`` are an exact neighbouring pair: every other
        user's response tree is identical.
        """
        keys = dict(self.user_keys)
        keys[int(k)] = _key_array(key)
        return replace(self, user_keys=keys)

    # -- one episode -----------------------------------------------------------
    def reset(self, k: int) -> int:
        """Start user ``k``'s episode; returns the initial state s_0."""
        run = self._run
        key = self.user_key(k)
        w = run["philox"].block(key, np.zeros(4, dtype=_U64))
        s = int(self._d0cdf.searchsorted((int(w[0]) >> 11) * _TWO_M53, "right"))
        run.update(key=key, h=0, s=min(s, self.n_states - 1), c2=int(w[2]), c3=int(w[3]))
        return run["s"]

    def step(self, a: int) -> tuple[float, int]:
        """Take action ``a`` at the current step; returns (reward, next state).

        Raises
        ------
        UsageError
            No episode is running (call ``reset``), the episode already has H
            steps, or ``a`` is not in [0, A).
        """
        run = self._run
        h = run["h"]
        if h is None or h >= run["H"]:
            raise UsageError("no step left in this episode: call reset(k) first "
                             f"(an episode has H={self.horizon} steps).")
        a = int(a)
        if not 0 <= a < run["A"]:
            raise UsageError(f"action must be in [0, {self.n_actions}). Got {a}.")
        s = run["s"]
        ctr = run["ctr"]
        ctr[0], ctr[1], ctr[2], ctr[3] = h + 1, a, run["c2"], run["c3"]
        w = run["philox"].block(run["key"], ctr).tolist()
        s_next = int(self._cdf[h if run["cdf_steps"] else 0, s, a].searchsorted((w[0] >> 11) * _TWO_M53, "right"))
        if s_next >= run["S"]:
            s_next = run["S"] - 1
        rew = self._rew[h if run["rew_steps"] else 0, s, a]
        r = float(rew[s_next] if run["rew_next"] else rew)
        run["h"], run["s"], run["c2"], run["c3"] = h + 1, s_next, w[2], w[3]
        return r, s_next

    def rollout(self, k: int, pi) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """User ``k``'s whole episode under the deterministic Markov policy ``pi``, in one call.

        The same as ``s = reset(k)`` followed by ``step(pi[h, s])`` for h = 0..H-1
        (the same Philox blocks, states and rewards), without the per-step
        calls: the episode loop of ``privaudit.online.protocol.run_episodes``
        for agents that act by their declared policy.

        Parameters
        ----------
        k : int
            The user.
        pi : array of int, shape (H, S)
            Actions in [0, A).

        Returns
        -------
        states : ndarray, shape (H + 1,), int64
            s_0, ..., s_H.
        actions : ndarray, shape (H,), int64
            pi[h, s_h].
        rewards : ndarray, shape (H,), float64

        Raises
        ------
        UsageError
            ``pi`` of the wrong shape or with actions outside [0, A).
        """
        pi = np.asarray(pi)
        run = self._run
        H, S, A = run["H"], run["S"], run["A"]
        if pi.shape != (H, S) or not np.issubdtype(pi.dtype, np.integer) or pi.min() < 0 or pi.max() >= A:
            raise UsageError(f"`pi` must hold integer actions in [0, {A}) with shape ({H}, {S}). "
                             f"Got shape {pi.shape}, dtype {pi.dtype}.")
        s = self.reset(k)
        acts = pi.tolist()
        if "cdf_lists" not in run:   # Python lists of the tables when small: bisect and list look-ups
            small = self._cdf.size <= _LIST_TABLES_MAX and self._rew.size <= _LIST_TABLES_MAX
            run["cdf_lists"] = (self._cdf.tolist(), self._rew.tolist()) if small else None
        lists = run["cdf_lists"]
        cdf, rew = lists if lists is not None else (self._cdf, self._rew)
        philox = run["philox"]
        bg, st, key = philox._bg, philox._state, run["key"].tolist()
        c2, c3 = run["c2"], run["c3"]
        cdf_steps, rew_steps, rew_next = run["cdf_steps"], run["rew_steps"], run["rew_next"]
        states, actions, rewards = [s], [], []
        for h in range(H):   # sequential by nature: each step's block chains on the last (as step)
            a = acts[h][s]
            st["state"] = {"counter": [h + 1, a, c2, c3], "key": key}   # the block at (key, counter), as step
            bg.state = st
            w = bg.random_raw(4).tolist()
            u = (w[0] >> 11) * _TWO_M53
            hc, hr = (h if cdf_steps else 0), (h if rew_steps else 0)
            if lists is not None:
                s_next = bisect.bisect_right(cdf[hc][s][a], u)     # = searchsorted(..., "right")
            else:
                s_next = int(cdf[hc, s, a].searchsorted(u, "right"))
            if s_next >= S:
                s_next = S - 1
            rw = rew[hr][s][a] if lists is not None else rew[hr, s, a]
            rewards.append(float(rw[s_next] if rew_next else rw))
            actions.append(a)
            states.append(s_next)
            s, c2, c3 = s_next, w[2], w[3]
        run["h"], run["s"], run["c2"], run["c3"] = H, s, c2, c3
        return (np.array(states, dtype=np.int64), np.array(actions, dtype=np.int64),
                np.array(rewards, dtype=np.float64))

    def keys(self, users) -> np.ndarray:
        """The keys of ``users`` (int array (N,), each >= 0), shape (N, 2) uint64: :meth:`user_key` of each."""
        users = np.asarray(users, dtype=np.int64)
        if users.size and users.min() < 0:
            raise UsageError(f"user index must be >= 0. Got {int(users.min())}.")
        keys = np.stack([np.full(users.shape, self.world_key, dtype=_U64), users.astype(_U64)], axis=-1)
        for k, key in self.user_keys.items():   # the few replaced users
            keys[users == k] = key
        return keys

    def rollout_users(self, users, pis, which=None, keys=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Many users' episodes at once: user ``users[i]`` follows ``pis[which[i]]`` (vectorised over users).

        Row i equals ``rollout(users[i], pis[which[i]])`` exactly (``privaudit.online.rollout.play``).

        Parameters
        ----------
        users : array of int, shape (N,)
        pis : array of int, shape (H, S) (every user) or (P, H, S) with ``which``
            Actions in [0, A).
        which : array of int, shape (N,), optional
            Index into ``pis`` per user (default: all 0).
        keys : ndarray, shape (N, 2), uint64, optional
            The users' keys when not this environment's (:meth:`keys` of another environment with
            the same MDP: R independent user streams played in lockstep).

        Returns
        -------
        states (N, H + 1) int64, actions (N, H) int64, rewards (N, H) float64

        Raises
        ------
        UsageError
            ``pis`` of the wrong shape or with actions outside [0, A), ``which`` out of range.
        """
        H, S, A = self.horizon, self.n_states, self.n_actions
        pis = np.asarray(pis)
        pis = pis[None] if pis.ndim == 2 else pis
        if (pis.ndim != 3 or pis.shape[1:] != (H, S) or not np.issubdtype(pis.dtype, np.integer)
                or pis.min() < 0 or pis.max() >= A):
            raise UsageError(f"`pis` must hold integer actions in [0, {A}) with shape ({H}, {S}) or (P, {H}, {S}). "
                             f"Got shape {pis.shape}, dtype {pis.dtype}.")
        users = np.asarray(users, dtype=np.int64).reshape(-1)
        which = np.zeros(len(users), dtype=np.int64) if which is None else np.asarray(which, dtype=np.int64)
        if which.shape != users.shape or (which.size and (which.min() < 0 or which.max() >= len(pis))):
            raise UsageError(f"`which` must give a policy index in [0, {len(pis)}) per user ({len(users)}).")
        keys = self.keys(users) if keys is None else np.asarray(keys, dtype=_U64)
        return play(keys, pis, which, self._cdf, self._rew, self._d0cdf)

    def respond(self, k: int, actions) -> tuple[np.ndarray, np.ndarray]:
        """User ``k``'s response to a fixed action sequence (for tests and audits).

        Parameters
        ----------
        k : int
        actions : array of int, shape (H,)

        Returns
        -------
        states : ndarray, shape (H + 1,), int64
            s_0, ..., s_H.
        rewards : ndarray, shape (H,), float64
        """
        actions = np.asarray(actions)
        if actions.shape != (self.horizon,):
            raise UsageError(f"`actions` must have shape ({self.horizon},). Got {actions.shape}.")
        states = np.empty(self.horizon + 1, dtype=np.int64)
        rewards = np.empty(self.horizon)
        states[0] = self.reset(k)
        for h, a in enumerate(actions):  # sequential by nature: each step's block chains on the last
            rewards[h], states[h + 1] = self.step(int(a))
        return states, rewards


def make_env(name: str, *, world_key: int = 0, horizon: int | None = None, states: int | None = None,
             actions: int | None = None, instance_seed: int | None = None) -> EpisodicEnv:
    """Build an episodic environment by name or from an MDP ``.npz`` file.

    Parameters
    ----------
    name : str
        One of ``ENV_NAMES`` or a path to an ``.npz`` written by
        ``privaudit.mdp.io.save_mdp`` (e.g. ``privaudit simulate --mdp-out``).
    world_key : int, default 0
        Default user keys are (world_key, k).
    horizon, states, actions, instance_seed : int, optional
        Size options; defaults in ``ENV_DEFAULTS`` (riverswim: H = 20, S = 6;
        random-tabular: S = 10, A = 5, H = 10, instance 0; icu-sepsis: H = 20;
        synthetic-linear: H = 20, instance 0). An option that does not apply
        to the environment is refused.

    Returns
    -------
    EpisodicEnv
        With ``features`` set for synthetic-linear (the project's map, phi/3,
        ``privaudit.mdp.synthetic_linear.synthetic_linear_features``).

    Raises
    ------
    UsageError
        Unknown name, an option that does not apply, bad sizes, rewards
        outside [0, 1].
    ArtifactError
        An unreadable MDP file.
    """
    given = {"horizon": horizon, "states": states, "actions": actions, "instance_seed": instance_seed}
    if name not in ENV_NAMES:
        if not str(name).endswith(".npz"):
            raise UsageError(f"unknown environment {name!r}; choose one of {list(ENV_NAMES)} or a path to an "
                             "MDP .npz file.")
        if not Path(name).is_file():
            raise UsageError(f"`env` {str(name)!r} is neither a known environment ({', '.join(ENV_NAMES)}) nor an "
                             f"existing .npz file: {Path(name).absolute()} does not exist (write one with "
                             "`privaudit simulate ... --mdp-out MDP.npz`).")
        bad = [k for k, v in given.items() if v is not None]
        if bad:
            raise UsageError(f"{', '.join(f'`{k}`' for k in bad)} {'does' if len(bad) == 1 else 'do'} not apply to an MDP "
                             f"file ({name}); the file fixes S, A and H.")
        mdp = load_mdp(Path(name))
        return EpisodicEnv(mdp, world_key=world_key, name=Path(name).name)
    defaults = ENV_DEFAULTS[name]
    bad = [k for k, v in given.items() if v is not None and defaults[k] is None]
    if bad:
        raise UsageError(f"{', '.join(f'`{k}`' for k in bad)} {'does' if len(bad) == 1 else 'do'} not apply to {name}.")
    opt = {k: (given[k] if given[k] is not None else d) for k, d in defaults.items()}
    _check_env_size(name, opt)
    features = None
    if name == "riverswim":
        mdp = riverswim_mdp(horizon=opt["horizon"], states=opt["states"])
    elif name == "random-tabular":
        mdp = random_tabular_mdp(opt["states"], opt["actions"], opt["horizon"], opt["instance_seed"])
    elif name == "icu-sepsis":
        mdp = load_icu_sepsis(horizon=opt["horizon"])
    else:
        mdp = synthetic_linear_mdp(opt["instance_seed"], opt["horizon"])
        features = synthetic_linear_features()
    return EpisodicEnv(mdp, world_key=world_key, features=features, name=name)


def _check_env_size(name: str, opt: dict) -> None:
    """Refuse, before building it, an environment whose (H, S, A, S) transition table would take more than half
    the physical memory (``--horizon 10**8`` ran for minutes; ``--states 10**20`` ended in a numpy traceback)."""
    H, S = opt["horizon"], opt.get("states") or (716 if name == "icu-sepsis" else 2)
    A = opt.get("actions") or (25 if name == "icu-sepsis" else 100 if name == "synthetic-linear" else 2)
    need, phys = 8 * H * S * A * S, physical_memory_bytes()
    if phys is not None and need > phys / 2:
        raise UsageError(f"{name} with H={H}, S={S}, A={A} needs about {need / 2**30:.3g} GiB for its (H, S, A, S) "
                         f"transition table, above half of this machine's {phys / 2**30:.1f} GiB. Use a smaller "
                         "`horizon` or `states`.")

