"""PUCB's constants as formulas of (S, A, H, K, budget, failure probability): the one place.

Vietri, Balle, Krishnamurthy & Wu (2020) give PUCB's structure (Algorithm 2,
PrivQ in Algorithm 3: a sampling bonus phi~ plus a counter-error bonus psi~);
the error bound E, the bonuses and PrivQ's threshold used here are this
project's derivation [D], written out in docs/online.md ("PrivQ"). With

    C      = 2 S A H + S^2 A H            number of scalar counters (Vietri et al. 2020, text of Algorithm 2)
    L      = floor(log2 K) + 1            tree levels, K = T = number of episodes/releases
    b      = 6 H L / eps                  Laplace node scale (eps/3 per family, l1 <= 2H per family
                                          under replacement: eps/(6H) per counter, docs/online.md)
    sigma^2 = 3 H L / rho                 Gaussian node variance (rho/3 per family, l2^2 <= 2H)
    lambda = ln(2 C K / beta)

the **theory** set is that derivation:

    E       = tree_error_bound(mech, scale, L, beta/2, n_counters=C, n_releases=K)
              (Laplace: b max(sqrt(L), sqrt(lambda')) sqrt(8 lambda'), lambda' = ln(4CK/beta))
    Q_h(s,a) = H - h                      if n~ <= 2 E            (maximal optimism; 0-based h)
             = clip(r^ + P^ . V_{h+1} + phi + psi, 0, H - h)      otherwise
    r^      = clip(r~ / n~, 0, 1),  P^(s') = max(m~(s'), 0) / n~
    phi     = (H + 1) sqrt(2 lambda / (n~ - E))          sampling (Hoeffding, UBEV-type) bonus
    psi     = (2 + (S + 1) H) E / n~                      counter-error bonus

(the failure probability beta is split: beta/2 for the counters' error, beta/2
inside lambda for the sampling bonus; Q is clipped to [0, H - h] as every
private variant must: noisy counts can make r^ + P^ . V negative).

With the theory constants the privacy terms dominate for every K that fits
in a run: at S = 10, A = 5, H = 10, K = 10^5, eps = 1, E is about 7 * 10^4,
so n~ <= 2E for every cell and the agent never leaves maximal optimism
(regret linear in K). The **practical** set keeps the formulas and changes
four documented multipliers:

| constant | theory | practical |
|---|---|---|
| E | uniform high-probability bound (union over C K) | the standard deviation of one release's noise at L open nodes: b sqrt(2L) (Laplace), sigma sqrt(L) (Gaussian) |
| threshold c_thr (n~ <= c_thr E) | 2 | 1 |
| sampling-bonus multiplier c_phi | 1 | 0.1 |
| counter-bonus multiplier c_psi | 1 | 0.1 |

The practical set carries no regret guarantee; it exists so that the
regret curves show learning within K <= 10^5 (the multipliers are round
numbers, not tuned per environment). The non-private twin (UCB-VI, a
UBEV-style baseline) is the same code with exact counts: E = 0, psi = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from privaudit.core.errors import UsageError
from privaudit.online.counters import (gaussian_node_sigma, laplace_node_scale, tree_error_bound,
                                       tree_levels)

#: Default failure probability beta of the confidence bounds.
DEFAULT_BETA = 0.05


@dataclass(frozen=True)
class PUCBConstants:
    """The multipliers that distinguish the theory and practical constant sets."""

    #: ``"theory"`` or ``"practical"``.
    name: str
    #: ``"union"``: E is the uniform high-probability bound over all C counters and K releases at beta/2; ``"std"``:
    #: E is the standard deviation of one release's noise with L open nodes.
    error: str
    #: A cell is maximally optimistic while n~ <= c_threshold * E.
    c_threshold: float
    #: Multiplier of the sampling bonus (H + 1) sqrt(2 lambda / (n~ - E)).
    c_phi: float
    #: Multiplier of the counter bonus (2 + (S + 1) H) E / n~.
    c_psi: float


THEORY = PUCBConstants("theory", "union", 2.0, 1.0, 1.0)
PRACTICAL = PUCBConstants("practical", "std", 1.0, 0.1, 0.1)
CONSTANT_SETS = {"theory": THEORY, "practical": PRACTICAL}


@dataclass(frozen=True)
class PUCBCalibration:
    """Everything PUCB needs that is a function of public facts only."""

    #: ``"laplace"``, ``"gaussian"`` or ``"none"`` (the non-private twin).
    mechanism: str
    #: Node scale b or sigma (0 for ``none``).
    scale: float
    #: L.
    n_levels: int
    #: C = 2SAH + S^2AH.
    n_counters: int
    #: Per-family one-step sensitivity: 2H (l1) or sqrt(2H) (l2); 0 for none.
    step_sensitivity: float
    #: eps/3 or rho/3 per family.
    family_budget: float | None
    #: The counter error used by PrivQ (see ``PUCBConstants.error``).
    E: float
    #: lambda = ln(2 C K / (beta/2)) of the sampling bonus.
    log_term: float
    constants: PUCBConstants
    #: The reward sums count in units of 2^-reward_bits (:func:`reward_lattice_bits`).
    reward_bits: int = 8


#: Finest reward lattice: 2^-8.
MAX_REWARD_BITS = 8
#: Lattice scales up to which the exact table samplers stay on their fast path
#: (privacy.samplers: table half-width capped at 2^17 - 2, i.e. b up to about 6e3, sigma up to about 2e4).
FAST_LATTICE_SCALE = {"laplace": 4096.0, "gaussian": 16384.0}


def reward_lattice_bits(mechanism: str, scale: float) -> int:
    """Bits of PUCB's reward lattice: the finest 2^-bits (bits <= 8) keeping scale 2^bits on the fast path.

    A function of the public node scale only. The reward-sum counter holds
    integers in units of 2^-bits and draws its exact discrete noise at scale
    ``scale * 2^bits``; a finer grid than the noise needs would only push the
    exact sampler onto its slow tail path (b 2^8 reaches 4e5 at eps = 1).
    With noise of scale b >= 16 per node, rounding each reward to 2^-bits
    (stochastically, unbiased; ``privaudit.online.tabular.pucb``) adds less than the
    noise does.

    Returns
    -------
    int
        In [0, 8]; 8 for ``"none"``.
    """
    if mechanism not in FAST_LATTICE_SCALE or not scale > 0:
        return MAX_REWARD_BITS
    return int(min(MAX_REWARD_BITS, max(0, math.floor(math.log2(FAST_LATTICE_SCALE[mechanism] / scale)))))


def calibrate(S: int, A: int, H: int, K: int, *, epsilon: float | None = None, rho: float | None = None,
              beta: float = DEFAULT_BETA, constants: str | PUCBConstants = "practical") -> PUCBCalibration:
    """PUCB's noise scale, error bound and bonus log-term from public facts.

    Parameters
    ----------
    S, A, H, K : int
        States, actions, horizon, number of episodes (public, fixed before the run).
    epsilon : float, optional
        Pure-DP budget of the whole run (Laplace counters, eps/3 per family).
        ``math.inf`` gives the non-private twin.
    rho : float, optional
        zCDP budget (Gaussian counters, rho/3 per family). Exactly one of
        ``epsilon`` and ``rho`` must be given.
    beta : float, default 0.05
        Failure probability of the confidence bounds, in (0, 1).
    constants : {"theory", "practical"} or PUCBConstants

    Returns
    -------
    PUCBCalibration

    Raises
    ------
    UsageError
        Both or neither budget, a non-positive budget, beta outside (0, 1),
        sizes < 1, an unknown constant set.
    """
    S, A, H, K = int(S), int(A), int(H), int(K)
    if min(S, A, H, K) < 1:
        raise UsageError(f"S, A, H and K must be >= 1. Got S={S}, A={A}, H={H}, K={K}.")
    if (epsilon is None) == (rho is None):
        raise UsageError("give exactly one of `epsilon` (Laplace counters) and `rho` (Gaussian counters).")
    if not 0 < beta < 1:
        raise UsageError(f"`beta` must be in (0, 1). Got {beta!r}.")
    if isinstance(constants, str):
        if constants not in CONSTANT_SETS:
            raise UsageError(f"`constants` must be one of {sorted(CONSTANT_SETS)}. Got {constants!r}.")
        constants = CONSTANT_SETS[constants]
    budget = float(epsilon if epsilon is not None else rho)
    if not budget > 0 or math.isnan(budget):
        raise UsageError(f"the privacy budget must be > 0 (math.inf for no privacy). Got {budget!r}.")
    L = tree_levels(K)
    C = 2 * S * A * H + S * S * A * H
    log_term = math.log(4.0 * C * K / beta)  # ln(2CK/beta') with beta' = beta/2
    if math.isinf(budget):
        return PUCBCalibration("none", 0.0, L, C, 0.0, None, 0.0, log_term, constants)
    if epsilon is not None:
        mech, sens = "laplace", 2.0 * H
        scale = laplace_node_scale(sens, L, budget / 3.0)
        std = scale * math.sqrt(2.0 * L)
    else:
        mech, sens = "gaussian", math.sqrt(2.0 * H)
        scale = gaussian_node_sigma(sens, L, budget / 3.0)
        std = scale * math.sqrt(L)
    if constants.error == "union":
        E = tree_error_bound(mech, scale, L, beta / 2.0, n_counters=C, n_releases=K)
    elif constants.error == "std":
        E = std
    else:
        raise UsageError(f"unknown error mode {constants.error!r}; use 'union' or 'std'.")
    return PUCBCalibration(mech, scale, L, C, sens, budget / 3.0, float(E), log_term, constants,
                           reward_lattice_bits(mech, scale))
