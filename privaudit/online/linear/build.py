"""Build a linear explorer by name, with its theory or practical constants.

Names: ``lsvi-ucb``, ``lsvi-ucb-pp`` (non-private), ``luyo``, ``ngo``,
``dp-lsvi-ucb-pp`` (rho-zCDP, hence (eps, delta)-JDP by the billboard lemma).
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core import registry
from privaudit.core.errors import UsageError
from privaudit.privacy.accounting import DEFAULT_REPORT_DELTA
from privaudit.online.linear.constants import CONSTANT_SETS, Problem, lsvi_ucb_constants, luyo_constants, ngo_constants
from privaudit.online.linear.constants_pp import dp_lsvi_ucb_pp_constants, lsvi_ucb_pp_constants
from privaudit.online.linear.base import LinearExplorer
from privaudit.online.linear.lsvi_ucb import LSVIUCB
from privaudit.online.linear.luyo import LuyoLSVIUCB
from privaudit.online.linear.ngo import NgoLSVIUCB
from privaudit.online.linear.lsvi_ucb_pp import LSVIUCBPlusPlus

#: Linear explorer names (the ``online`` entries of :mod:`privaudit.core.registry` that need features),
#: and whether each is private.
LINEAR_ALGOS = {n: registry.get(n).private for n in registry.names(family="online")
                if registry.get(n).needs_features}


def build_linear(env, n_episodes, budget, constants, fail_prob, rng, *, algo: str) -> LinearExplorer:
    """The builder of every linear explorer in :mod:`privaudit.core.registry` (``privaudit explore``).

    The environment supplies the public feature map (``env.phi``) and reward
    function (``env.mdp.expected_reward``). A private algorithm takes a
    Gaussian budget (``rho``; None: no noise); a Laplace (``epsilon``) budget
    is refused (these mechanisms are Gaussian, zCDP).

    Raises
    ------
    UsageError
        A Laplace budget; see also :func:`make_linear_agent`.
    """
    # budget: a privaudit.privacy.budget.Budget, or None (no privacy: no noise)
    rho, delta = math.inf, DEFAULT_REPORT_DELTA
    if budget is not None:
        if budget.family.pure:
            raise UsageError(f"`algo` {algo} adds Gaussian noise (rho-zCDP): give `rho` "
                             f"(reported as (eps, delta)-JDP at `delta`), or `epsilon` inf for no noise.")
        rho, delta = float(budget.rho), budget.delta
    reward = np.stack([env.mdp.expected_reward(h) for h in range(env.horizon)])
    return make_linear_agent(algo, env.phi, reward, env.horizon, n_episodes, rho=rho, delta=delta,
                             constants=constants, fail_prob=fail_prob, rng=rng)



def make_linear_agent(algo: str, phi, reward, horizon: int, n_episodes: int, *,
                      rho: float = math.inf, delta: float = 1e-5, constants: str = "practical",
                      fail_prob: float = 0.01, rng: np.random.Generator | None = None,
                      reward_to_all: bool = False) -> LinearExplorer:
    """A linear explorer ready to run K episodes.

    Parameters
    ----------
    algo : str
        One of :data:`LINEAR_ALGOS`.
    phi : array_like, shape (S, A, d)
        Public feature map (norms enforced <= 1).
    reward : array_like, shape (H, S, A)
        Public reward function, values in [0, 1] (used by the ++ algorithms, which assume it known; by
        the others only with ``reward_to_all``).
    horizon, n_episodes : int
        H and the public K.
    rho : float
        zCDP budget of a private algorithm (math.inf: no noise); refused (not
        math.inf) for a non-private one.
    delta : float
        Only used by Luyo's batch count.
    constants : {"theory", "practical"}
    fail_prob : float
        Failure probability of the confidence bounds.
    rng : numpy.random.Generator, optional
        Noise stream (OS entropy when omitted).
    reward_to_all : bool
        Give the reward function to LSVI-UCB, Luyo and Ngo too (Q = r + w^T phi + bonus, w regressing
        V_{h+1} alone), so that a comparison gives every explorer the same information (issue 31, D3).
        False (default): they regress r + V_{h+1} as in their papers.

    Raises
    ------
    UsageError
        Unknown algorithm or constant set; a finite rho for a non-private algorithm.
    """
    if algo not in LINEAR_ALGOS:
        raise UsageError(f"unknown linear algorithm {algo!r}; choose one of {list(LINEAR_ALGOS)}.")
    if constants not in CONSTANT_SETS:
        raise UsageError(f"`constants` must be one of {CONSTANT_SETS}. Got {constants!r}.")
    if not LINEAR_ALGOS[algo] and not math.isinf(rho):
        raise UsageError(f"{algo} is not private; it takes no privacy budget.")
    table = np.asarray(phi, dtype=np.float64)
    if table.ndim != 3:
        raise UsageError(f"`phi` must have shape (S, A, d). Found shape {table.shape}.")
    S, A, d = table.shape
    pb = Problem(int(horizon), S, A, d, int(n_episodes), fail_prob)
    known = reward if reward_to_all else None
    if algo == "lsvi-ucb":
        return LSVIUCB(table, horizon, n_episodes, lsvi_ucb_constants(pb, constants), rng=rng, reward=known)
    if algo == "luyo":
        return LuyoLSVIUCB(table, horizon, n_episodes, luyo_constants(pb, rho, constants, delta=delta),
                           rng=rng, reward=known)
    if algo == "ngo":
        return NgoLSVIUCB(table, horizon, n_episodes, ngo_constants(pb, rho, constants), rng=rng, reward=known)
    if algo == "lsvi-ucb-pp":
        return LSVIUCBPlusPlus(table, reward, horizon, n_episodes, lsvi_ucb_pp_constants(pb, constants),
                               rng=rng)
    return LSVIUCBPlusPlus(table, reward, horizon, n_episodes,
                           dp_lsvi_ucb_pp_constants(pb, rho, constants), private=True, rng=rng)
