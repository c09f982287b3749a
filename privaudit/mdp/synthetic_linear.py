"""The synthetic linear MDP of Qiao & Wang's (2023) simulations (their appendix "Details for the Evaluation part").

S = {0, 1}, A = {0, ..., 99}, d = 10, H = 20 (docs/mdp.md, "The synthetic linear MDP"). Each action
a has an 8-bit binary code **a** (coordinate j = bit j of a, least significant
first: the paper does not fix the order; with this order the always-zero bit
128 meets theta's zero coordinate 7). With

    delta(s, a) = 1 if 1{s = 0} == 1{a = 0} else 0,
    phi(s, a)   = (a^T, delta(s, a), 1 - delta(s, a)) in R^10,
    nu_h(0)     = (0, ..., 0, alpha_{h,1}, alpha_{h,2}),
    nu_h(1)     = (0, ..., 0, 1 - alpha_{h,1}, 1 - alpha_{h,2}),
    theta_h     = (r_h/8, 0, r_h/8, 1/2 - r_h/2, r_h/8, 0, r_h/8, 0, r_h/2, 1/2 - r_h/2),

the MDP has P_h(s' | s, a) = <phi(s, a), nu_h(s')> and r_h(s, a) = <phi(s, a),
theta_h> in [0, 1]; alpha_{h,1}, alpha_{h,2}, r_h ~ U[0, 1] per step h, drawn
from ``np.random.default_rng(instance_seed)`` (public: the instance, not any
noise). The initial state is uniform; the behaviour policy takes a = 0 w.p.
0.6 and every other action w.p. 0.4/99.

The raw map has ||phi|| up to sqrt(7) (a < 100 has at most 6 one-bits), so the
learners use phi/3 (public constant; nu_h and theta_h scale by 3 and the MDP
is unchanged) to meet ||phi|| <= 1, which DP-VAPVI's sensitivities need (docs/mdp.md, "Feature norm").
Steps are 0-based h = 0..H-1 here (the paper's h = 1..H).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.mdp.features import FeatureMap, enforce_norm
from privaudit.mdp.tabular import TabularMDP

N_STATES = 2
N_ACTIONS = 100
DIM = 10
HORIZON = 20
#: Behaviour policy: probability of action 0 (Qiao & Wang (2023), appendix "Details for the Evaluation part").
BEHAVIOUR_P0 = 0.6
#: Public rescale constant of the feature map: ||phi|| <= sqrt(7) < 3 (docs/mdp.md, "Feature norm").
FEATURE_SCALE = 3.0


def raw_features() -> np.ndarray:
    """The paper's unscaled phi(s, a), shape (2, 100, 10), entries in {0, 1}."""
    a = np.arange(N_ACTIONS)
    bits = ((a[:, None] >> np.arange(8)[None, :]) & 1).astype(np.float64)  # (A, 8), LSB first
    s = np.arange(N_STATES)
    delta = ((s[:, None] == 0) == (a[None, :] == 0)).astype(np.float64)  # (S, A)
    phi = np.empty((N_STATES, N_ACTIONS, DIM))
    phi[:, :, :8] = bits[None]
    phi[:, :, 8] = delta
    phi[:, :, 9] = 1.0 - delta
    return phi


def synthetic_linear_features(norm: str = "rescale") -> FeatureMap:
    """The paper's feature map with ||phi|| <= 1: phi/3 (``rescale``) or per-vector ``clip``."""
    table, scale = enforce_norm(raw_features(), norm, FEATURE_SCALE if norm == "rescale" else None)
    return FeatureMap(table, "synthetic-linear", norm, scale, {})


@dataclass(frozen=True, repr=False)
class SyntheticLinearInstance:
    """Parameters of one instance (0-based steps).

    Attributes
    ----------
    alpha : ndarray, shape (H, 2)
        alpha_{h,1}, alpha_{h,2} ~ U[0, 1].
    r : ndarray, shape (H,)
        r_h ~ U[0, 1].
    nu : ndarray, shape (H, 2, 10)
        nu_h(s') for the raw (unscaled) features.
    theta : ndarray, shape (H, 10)
        theta_h for the raw features.
    """

    alpha: np.ndarray
    r: np.ndarray
    nu: np.ndarray
    theta: np.ndarray

    def __repr__(self) -> str:
        return f"SyntheticLinearInstance(H={len(self.r)})"


def synthetic_linear_instance(instance_seed: int, horizon: int = HORIZON) -> SyntheticLinearInstance:
    """Draw alpha_{h,1}, alpha_{h,2}, r_h for h = 0..H-1 from ``default_rng(instance_seed)``.

    Raises
    ------
    UsageError
        If ``horizon`` < 1 or ``instance_seed`` < 0.
    """
    H = int(horizon)
    if H < 1:
        raise UsageError(f"`horizon` must be >= 1. Got {horizon}.")
    if int(instance_seed) < 0:
        raise UsageError(f"`instance_seed` must be >= 0. Got {instance_seed}.")
    rng = np.random.default_rng(int(instance_seed))
    alpha = rng.uniform(0.0, 1.0, size=(H, 2))
    r = rng.uniform(0.0, 1.0, size=H)
    nu = np.zeros((H, N_STATES, DIM))
    nu[:, 0, 8:] = alpha
    nu[:, 1, 8:] = 1.0 - alpha
    half = 0.5 - r / 2
    theta = np.stack([r / 8, 0 * r, r / 8, half, r / 8, 0 * r, r / 8, 0 * r, r / 2, half], axis=1)
    return SyntheticLinearInstance(alpha, r, nu, theta)


def synthetic_linear_mdp(instance_seed: int = 0, horizon: int = HORIZON) -> TabularMDP:
    """The synthetic linear MDP as a TabularMDP with per-step P (H, 2, 100, 2) and r (H, 2, 100).

    Parameters
    ----------
    instance_seed : int
        Seed of the public instance parameters (alpha, r_h).
    horizon : int, default 20
        H.

    Returns
    -------
    TabularMDP
        P_h(s'|s,a) = <phi(s,a), nu_h(s')>, r_h(s,a) = <phi(s,a), theta_h>,
        d0 uniform on {0, 1}, no terminal states.
    """
    inst = synthetic_linear_instance(instance_seed, horizon)
    phi = raw_features()
    P = np.einsum("sad,htd->hsat", phi, inst.nu)
    r = np.einsum("sad,hd->hsa", phi, inst.theta)
    return TabularMDP(P=P, r=r, d0=np.full(N_STATES, 0.5), horizon=int(horizon),
                      name="synthetic-linear")  # the registry key: evaluate reports its references


def behaviour_policy(p0: float = BEHAVIOUR_P0) -> np.ndarray:
    """pi(a | s): a = 0 w.p. ``p0``, each other action w.p. (1 - p0)/99; shape (2, 100)."""
    pi = np.full((N_STATES, N_ACTIONS), (1.0 - p0) / (N_ACTIONS - 1))
    pi[:, 0] = p0
    return pi


def coverage_kappa(mdp: TabularMDP, fmap: FeatureMap, policy: np.ndarray | None = None) -> np.ndarray:
    """lambda_min(E_mu[phi phi^T]) at each step h under the behaviour policy, shape (H,).

    kappa = min_h of this (Qiao & Wang (2023), Section 2.1). With this map it is 0:
    bit 7 of a < 100 is always 0, so one coordinate never varies; the
    ridge term lambda * I makes the regressions well posed anyway.
    """
    pi = behaviour_policy() if policy is None else policy
    d_h = mdp.d0.copy()
    out = np.empty(mdp.horizon)
    for h in range(mdp.horizon):
        w = d_h[:, None] * pi  # (S, A) occupancy of (s_h, a_h)
        M = np.einsum("sa,sai,saj->ij", w, fmap.table, fmap.table)
        out[h] = np.linalg.eigvalsh(M)[0]
        d_h = np.einsum("sa,sat->t", w, mdp.transition(h))
    return out


def synthetic_linear_spec_doc(horizon: int = HORIZON, dataset_id: str = "synthetic-linear") -> dict:
    """Domain spec (JSON-ready) of logs simulated from the synthetic linear MDP.

    S = 2, A = 100, H, reward range [0, 1], each episode its own privacy unit
    (``unit_id``, max_episodes 1), features ``synthetic-linear`` (d = 10, rescale).
    """
    return {
        "format_version": 1,
        "dataset_id": dataset_id,
        "description": "Synthetic linear MDP of Qiao & Wang (2023), appendix 'Details for the Evaluation part'.",
        "horizon": int(horizon),
        "n_states": N_STATES,
        "n_actions": N_ACTIONS,
        "reward_range": [0.0, 1.0],
        "privacy_unit": {"column": "unit_id", "max_episodes": 1},
        "features": {"map": "synthetic-linear", "dim": DIM, "norm": "rescale"},
    }
