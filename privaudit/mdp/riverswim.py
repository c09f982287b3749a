"""RiverSwim (Strehl & Littman 2008), the standard hard-exploration tabular MDP.

The variant of Osband, Russo & Van Roy (2013, "(More) efficient RL via
posterior sampling", Appendix), used by the tabular private-RL papers
(e.g. Garcelon et al. 2021, "Local differential privacy for regret
minimization in RL"): S states in a chain (default 6), A = 2 actions,
0 = left (with the current), 1 = right (against it).

* left: moves to max(s - 1, 0) with probability 1;
* right: from state 0 stays w.p. 0.4 and moves right w.p. 0.6; from a middle
  state moves left w.p. 0.05, stays w.p. 0.6, moves right w.p. 0.35; from the
  last state moves left w.p. 0.4 and stays w.p. 0.6;
* rewards r(0, left) = 5/1000 and r(S - 1, right) = 1, all others 0 (so
  rewards lie in [0, 1], the range the private counters assume);
* every episode starts in state 0 (the leftmost state).

Stationary (P of shape (S, A, S)), no terminal states. The optimal policy
swims right; a myopic or under-exploring agent stays at the small reward on
the left.
"""

from __future__ import annotations

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.mdp.tabular import TabularMDP

#: Default number of states.
N_STATES = 6
#: Actions: 0 = left (with the current), 1 = right (against it).
N_ACTIONS = 2
#: Reward of "left" in state 0 and of "right" in the last state.
SMALL_REWARD = 5.0 / 1000.0
LARGE_REWARD = 1.0


def riverswim_mdp(horizon: int = 20, states: int = N_STATES) -> TabularMDP:
    """The RiverSwim chain as a stationary TabularMDP.

    Parameters
    ----------
    horizon : int, default 20
        H >= 1.
    states : int, default 6
        Chain length S >= 2.

    Returns
    -------
    TabularMDP
        ``P`` (S, 2, S), ``r`` (S, 2), ``d0`` = e_0, name ``"riverswim"``.

    Raises
    ------
    UsageError
        ``horizon`` < 1 or ``states`` < 2.

    References
    ----------
    Strehl & Littman, "An analysis of model-based interval estimation for
    Markov decision processes", JCSS 74(8), 2008. Osband, Russo & Van Roy,
    NeurIPS 2013, Appendix (the probabilities used here).
    """
    S, H = int(states), int(horizon)
    if S < 2:
        raise UsageError(f"`states` must be >= 2 for RiverSwim. Got {states}.")
    if H < 1:
        raise UsageError(f"`horizon` must be >= 1. Got {horizon}.")
    P = np.zeros((S, N_ACTIONS, S))
    s = np.arange(S)
    P[s, 0, np.maximum(s - 1, 0)] = 1.0
    mid = s[1:-1]
    P[mid, 1, mid - 1] = 0.05
    P[mid, 1, mid] = 0.6
    P[mid, 1, mid + 1] = 0.35
    P[0, 1, 0], P[0, 1, 1] = 0.4, 0.6
    P[S - 1, 1, S - 1], P[S - 1, 1, S - 2] = 0.6, 0.4
    r = np.zeros((S, N_ACTIONS))
    r[0, 0] = SMALL_REWARD
    r[S - 1, 1] = LARGE_REWARD
    d0 = np.zeros(S)
    d0[0] = 1.0
    return TabularMDP(P=P, r=r, d0=d0, horizon=H, name="riverswim")
