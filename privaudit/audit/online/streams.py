"""Neighbouring user streams for auditing the joint-DP claims of online explorers.

Under joint DP (docs/online.md; Ngo et al. (2022), Sahu (2025),
Definition 2.2; Vietri et al. (2020)) two runs are neighbours when one user's *whole
data* (her response tree: initial state and her reward and next state in
response to every action sequence) is replaced and every other user's tree is
unchanged. An :class:`AuditWorld` is one such stream, built from a public
environment of :mod:`privaudit.online.env` plus four *scripted* states the
auditor controls (adversarial users are allowed: Vietri et al. (2020) "malicious users
who can probe the agent", Ngo et al. (2022) adversarial initial states):

==========  =========================================================================
state       role
==========  =========================================================================
``x``       the decoy lane: user k of D starts here (absorbing, reward 1)
``y``       the canary lane: user k of D' starts here (absorbing, reward 1)
``p``       the probe state (linear worlds): phi(p, 0) = e_x, phi(p, 1) = e_c,
            the two directions the decoy and the canary fill; nobody visits it
``z``       the silent sink (absorbing, reward 0, feature 0): users after k
==========  =========================================================================

The stream is: users 0..k-1 are the environment's own users (Philox response
trees keyed by (world_key, u), identical in D and D'), user k is the decoy (D)
or the canary (D'), users k+1..k+m are silent (they start in ``z``: they add
nothing but zeros to any statistic, so the releases after k carry user k's
change alone). The run stops after user k + m; the agent's noise is sized for
the public K >= k + m + 1 (stopping early is post-processing of the first
k + m + 1 releases).

Features (linear explorers): the environment's own map (synthetic-linear) or
one-hot (s, a) features for a tabular environment, padded with two
coordinates: ``c`` (the canary's direction, e_c on every action at ``y``) and
``x`` (the decoy's, e_x at ``x``). No other user ever has a non-zero ``c`` or
``x`` coordinate, so a release's (c, c) and (x, x) Gram entries carry user k's
term exactly. With ``decoy="null"`` the decoy starts in ``z`` instead (a user
with feature 0 and reward 0): the pair then changes only the canary's
direction, which makes the determinant-doubling switch test fire in D' and
not in D (the catalogue's non-private switch test needs it).

Sensitivity reached by the default (orthogonal) pair, per step h: the Gram
term changes by ||w e_c e_c^T - w e_x e_x^T||_F = sqrt(2) w (the declared
Delta_F = sqrt(2) w_max when w = w_max); PUCB's three counter families each by
l1 = 2 (one unit removed at x, one added at y, rewards 1 at both), i.e. 2H per
family over the H steps: the declared sensitivity of every family.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.env import EpisodicEnv, make_env

#: Decoy kinds: "orthogonal" (user k of D fills e_x: full sensitivity), "null" (feature 0, reward 0).
DECOYS = ("orthogonal", "null")
#: Names of the four scripted states, in order after the environment's states.
SCRIPTED = ("x", "y", "p", "z")


@dataclass(frozen=True, repr=False)
class AuditWorld:
    """One user stream of a neighbouring pair (D or D').

    Attributes
    ----------
    env : EpisodicEnv
        The public environment of the background users 0..k-1.
    canary_user : int
        k.
    n_after : int
        m: silent users after k (the run stops after user k + m).
    n_episodes : int
        The public K the agent's noise is sized for (>= k + m + 1).
    start : int
        Initial state of user k: ``x``, ``y`` or ``z`` (null decoy).
    phi : ndarray, shape (S, A, d)
        Public features (norms <= 1); S = env states + 4.
    reward : ndarray, shape (H, S, A)
        Public reward function r_h(s, a) in [0, 1].
    side : str
        ``"D"`` or ``"D'"`` (for messages).
    """

    env: EpisodicEnv
    canary_user: int
    n_after: int
    n_episodes: int
    start: int
    phi: np.ndarray
    reward: np.ndarray
    side: str = "D"
    meta: dict = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        """H."""
        return self.env.horizon

    @property
    def n_states(self) -> int:
        """S (the environment's states plus x, y, p, z)."""
        return self.phi.shape[0]

    @property
    def n_actions(self) -> int:
        """A."""
        return self.phi.shape[1]

    @property
    def n_users(self) -> int:
        """Users played per run: k + m + 1."""
        return self.canary_user + self.n_after + 1

    def state(self, name: str) -> int:
        """Index of a scripted state (``x``, ``y``, ``p``, ``z``)."""
        return self.env.n_states + SCRIPTED.index(name)

    @property
    def c_dim(self) -> int:
        """Feature coordinate of the canary's direction e_c."""
        return self.phi.shape[2] - 2

    @property
    def x_dim(self) -> int:
        """Feature coordinate of the decoy's direction e_x."""
        return self.phi.shape[2] - 1

    def __repr__(self) -> str:
        return (f"AuditWorld(side={self.side!r}, env={self.env.name or self.env.mdp.name!r}, H={self.horizon}, "
                f"S={self.n_states}, A={self.n_actions}, k={self.canary_user}, m={self.n_after}, K={self.n_episodes})")

    def play(self, agent, on_prepare=None, on_update=None) -> None:
        """Run users 0..k+m through ``agent`` (the :class:`~privaudit.online.protocol.Agent` protocol).

        Parameters
        ----------
        agent : Agent
        on_prepare, on_update : callable, optional
            ``f(t, agent)`` after ``start_episode(t)`` (the release and policy
            of user t are fixed) and after ``end_episode()`` of user t.

        Notes
        -----
        Background users step through ``env`` (their responses depend on the
        actions only through their Philox trees); the scripted users stay in
        their absorbing state and receive ``reward[h, s, a]``.
        """
        H, k, env, rew = self.horizon, self.canary_user, self.env, self.reward
        silent = self.state("z")
        for t in range(self.n_users):  # users are sequential: each policy depends on the releases before it
            agent.start_episode(t)
            if on_prepare is not None:
                on_prepare(t, agent)
            pi = agent.policy()
            if t < k:
                s = env.reset(t)
                for h in range(H):
                    a = int(pi[h, s])
                    r, s2 = env.step(a)
                    agent.observe(h, s, a, r, s2)
                    s = s2
            else:
                s = self.start if t == k else silent
                for h in range(H):
                    a = int(pi[h, s])
                    agent.observe(h, s, a, float(rew[h, s, a]), s)
            agent.end_episode()
            if on_update is not None:
                on_update(t, agent)


def _base_features(env: EpisodicEnv) -> np.ndarray:
    """The environment's features, or one-hot (s, a) features (norm 1) for a tabular one."""
    if env.phi is not None:
        return np.asarray(env.phi, dtype=np.float64)
    S, A = env.n_states, env.n_actions
    return np.eye(S * A).reshape(S, A, S * A)


def make_world_pair(env: EpisodicEnv, *, canary_user: int = 0, n_after: int = 1, n_episodes: int | None = None,
                    decoy: str = "orthogonal"):
    """Two :class:`AuditWorld` streams that differ in user k's whole data only.

    Parameters
    ----------
    env : EpisodicEnv
        Background users' environment (needs A >= 2).
    canary_user : int
        k >= 0: users 0..k-1 are the environment's users.
    n_after : int
        m >= 0 silent users after k.
    n_episodes : int, optional
        Public K (default k + m + 1); must be >= k + m + 1.
    decoy : {"orthogonal", "null"}
        User k of D: in lane ``x`` (feature e_x, reward 1) or in the sink
        ``z`` (feature 0, reward 0).

    Returns
    -------
    (AuditWorld, AuditWorld, dict)
        D, D' and the pair's JSON description (no private data: the streams
        are simulated).

    Raises
    ------
    UsageError
        k < 0, m < 0, K too small, fewer than 2 actions, unknown decoy.
    """
    k, m = int(canary_user), int(n_after)
    if k < 0 or m < 0:
        raise UsageError(f"`canary_user` and `n_after` must be >= 0. Got {canary_user}, {n_after}.")
    K = k + m + 1 if n_episodes is None else int(n_episodes)
    if K < k + m + 1:
        raise UsageError(f"the public K={K} must cover the k + m + 1 = {k + m + 1} users played "
                         "(canary_user + n_after + 1).")
    if decoy not in DECOYS:
        raise UsageError(f"`decoy` must be one of {DECOYS}. Got {decoy!r}.")
    H, Sb, A = env.horizon, env.n_states, env.n_actions
    if A < 2:
        raise UsageError(f"an audit world needs >= 2 actions (the probe state compares two). Got A={A}.")
    base = _base_features(env)
    db = base.shape[2]
    d = db + 2
    S = Sb + len(SCRIPTED)
    phi = np.zeros((S, A, d))
    phi[:Sb, :, :db] = base
    x, y, p = Sb, Sb + 1, Sb + 2
    cdim, xdim = d - 2, d - 1
    phi[x, :, xdim] = 1.0
    phi[y, :, cdim] = 1.0
    phi[p, 0, xdim] = 1.0
    phi[p, 1, cdim] = 1.0
    reward = np.zeros((H, S, A))
    reward[:, :Sb] = np.stack([env.mdp.expected_reward(h) for h in range(H)])
    reward[:, x] = 1.0
    reward[:, y] = 1.0
    common = dict(env=env, canary_user=k, n_after=m, n_episodes=K, phi=phi, reward=reward)
    d_world = AuditWorld(start=x if decoy == "orthogonal" else Sb + 3, side="D", **common)
    dp_world = AuditWorld(start=y, side="D'", **common)
    desc = {
        "kind": "online-canary", "relation": "substitution",
        "unit": "one user (one episode): her whole response tree",
        "environment": env.name or env.mdp.name, "world_key": env.world_key,
        "horizon": H, "states": S, "actions": A, "feature_dim": d,
        "canary_user": k, "users_after": m, "public_episodes": K, "decoy": decoy,
        "d": ("user k starts in the decoy lane x (feature e_x, reward 1, absorbing)" if decoy == "orthogonal"
              else "user k starts in the silent sink z (feature 0, reward 0)"),
        "d_prime": "user k starts in the canary lane y (feature e_c, reward 1, absorbing)",
        "others": f"users 0..{k - 1} are the environment's users (identical trees in D and D'); users "
                  f"{k + 1}..{k + m} are silent (sink z, feature 0, reward 0); only the agent's noise is fresh "
                  "per run",
    }
    return d_world, dp_world, desc


def world_env(name: str, *, horizon: int | None = None, states: int | None = None, actions: int | None = None,
              instance_seed: int | None = None, world_key: int = 0) -> EpisodicEnv:
    """The background environment by name (``privaudit.online.env.make_env``), for the CLI."""
    return make_env(name, world_key=world_key, horizon=horizon, states=states, actions=actions,
                    instance_seed=instance_seed)


@dataclass(frozen=True)
class StreamSetup:
    """The simulated user streams an explorer is audited on (``privaudit audit --mechanism explore:ALGO``).

    Attributes
    ----------
    env_name : str
        Background users' environment (``privaudit.online.env.make_env``).
    env_options : dict or None
        Its options (``None`` values dropped).
    episodes, canary_user, users_after, decoy
        K, k, m and the pair kind of :func:`make_world_pair`.
    """

    env_name: str = "riverswim"
    env_options: dict | None = None
    episodes: int | None = None
    canary_user: int = 0
    users_after: int = 3
    decoy: str = "orthogonal"

    def world_pair(self):
        """``(D, D', description)``: :func:`make_world_pair` on this environment."""
        opts = {k: v for k, v in (self.env_options or {}).items() if v is not None}
        env = make_env(self.env_name, **opts)
        return make_world_pair(env, canary_user=self.canary_user, n_after=self.users_after,
                               n_episodes=self.episodes, decoy=self.decoy)
