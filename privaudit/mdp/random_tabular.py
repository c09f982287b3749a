"""Seeded random tabular MDPs for tests, audits and experiments.

The generating distribution (all draws from ``np.random.default_rng(instance_seed)``
split into independent child streams, so an instance is a pure function of
``(states, actions, horizon, instance_seed)``):

* transitions, non-stationary: P_h(. | s, a) ~ Dirichlet(alpha * 1_S)
  independently for every step h = 0..H-1 and every (s, a), shape (H, S, A, S);
* rewards, deterministic and non-stationary: r_h(s, a) ~ Uniform[0, 1]
  independently, shape (H, S, A) (inside the reward range [0, 1] that DP-APVI
  assumes, Qiao & Wang (2023), Section 2);
* initial distribution d0 ~ Dirichlet(1_S);
* no terminal states: every episode lasts exactly H steps.
"""

from __future__ import annotations

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.mdp.tabular import TabularMDP

#: Dirichlet concentration of each transition row (1 = uniform over the simplex).
DEFAULT_ALPHA = 1.0


def random_tabular_mdp(states: int, actions: int, horizon: int, instance_seed: int,
                       alpha: float = DEFAULT_ALPHA) -> TabularMDP:
    """A random non-stationary tabular MDP, a pure function of its arguments.

    Parameters
    ----------
    states : int
        S >= 1.
    actions : int
        A >= 1.
    horizon : int
        H >= 1.
    instance_seed : int
        Seed of the instance (public: it names the MDP, not any noise).
    alpha : float, default 1.0
        Dirichlet concentration of the transition rows; small values give
        near-deterministic transitions.

    Returns
    -------
    TabularMDP
        ``P`` (H, S, A, S) with rows ~ Dirichlet(alpha), ``r`` (H, S, A) ~
        Uniform[0, 1], ``d0`` (S,) ~ Dirichlet(1), no terminal states,
        ``name`` "random-tabular".

    Raises
    ------
    UsageError
        If a size is < 1, ``instance_seed`` < 0 or ``alpha`` <= 0.
    """
    S, A, H = int(states), int(actions), int(horizon)
    for key, v in (("states", S), ("actions", A), ("horizon", H)):
        if v < 1:
            raise UsageError(f"`{key}` must be >= 1. Got {v}.")
    if int(instance_seed) < 0:
        raise UsageError(f"`instance_seed` must be >= 0. Got {instance_seed}.")
    if not alpha > 0:
        raise UsageError(f"`alpha` must be > 0. Got {alpha}.")
    rng_P, rng_r, rng_d0 = np.random.default_rng(int(instance_seed)).spawn(3)
    P = rng_P.dirichlet(np.full(S, float(alpha)), size=(H, S, A))
    r = rng_r.uniform(0.0, 1.0, size=(H, S, A))
    d0 = rng_d0.dirichlet(np.ones(S))
    return TabularMDP(P=P, r=r, d0=d0, horizon=H, terminal_states=(), name="random-tabular")


def random_tabular_spec_doc(mdp: TabularMDP, dataset_id: str = "random-tabular",
                            description: str | None = None) -> dict:
    """The domain spec document of logs simulated from a random tabular MDP.

    Returns
    -------
    dict
        S, A, H of ``mdp``, no terminal states, reward range [0, 1], private
        rewards (no ``public_reward``: r_h(s, a) is not a next-state reward),
        privacy unit = one episode (column ``unit_id``, max_episodes 1).
    """
    return {
        "format_version": 1,
        "dataset_id": dataset_id,
        "description": description or "Logs of a seeded random tabular MDP (privaudit.mdp.random_tabular).",
        "horizon": mdp.horizon,
        "n_states": mdp.n_states,
        "n_actions": mdp.n_actions,
        "terminal_states": list(mdp.terminal_states),
        "reward_range": [0.0, 1.0],
        "privacy_unit": {"column": "unit_id", "max_episodes": 1},
    }
