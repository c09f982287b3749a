"""Every constant of the linear explorers: a *theory* and a *practical* set.

**theory**: the papers' formulas with every missing O(1) constant set to 1,
and with the high-probability noise bounds (lambda-tilde, L, Y) computed for
the noise the implementation actually adds (Sahu 2025, Lemma A.1, computes
them for its own, looser noise; docs/online.md, "Constants"). **practical**: the
theory set times the documented multipliers of :data:`PRACTICAL`, chosen so
that every algorithm learns on the synthetic linear MDP (d = 10, H = 20) at
K <= 10^5. The multipliers change confidence radii, the eigenvalue shift,
the variance-weighting terms and the switch cap; they never change a noise
scale, so both sets have the same privacy guarantee.

Notation: H horizon, d feature dimension, K public number of episodes, p the
failure probability of the confidence bounds (default 0.01), lambda the ridge
regulariser, lambda-tilde a bound on the operator norm of the Gram noise
(w.p. >= 1 - p/3 over all releases), shift = 2 lambda-tilde is added to each
released Gram matrix so that it is >= G + (lambda + lambda-tilde) I w.h.p.,
and ``floor = lambda + lambda-tilde`` floors its eigenvalues (post-processing).

Sources
-------
* LSVI-UCB: Jin, Yang, Wang, Jordan, COLT 2020, Theorem 3.1: lambda = 1,
  beta = c d H sqrt(iota), iota = ln(2 d T / p), T = K H (c = 1).
* Luyo et al. 2021 (arXiv:2112.01585): B = ceil((K eps)^{2/5} d^{3/5} H^{1/5})
  batches (as read by Sahu's public code, github.com/sharansahu/DiffPrivateModelEval,
  ``DP_LSVI_Luyo.py``, whose docstring cites Luyo et al.'s Appendix E.1; not checked
  against the paper); tree Gram noise and fresh
  vector noise with rho/2 each (this project's zCDP form; docs/online.md).
* Ngo, Vietri & Wu 2022 (Section 4.2, privacy analysis): rho/2 Gram trees over K leaves, rho/2 to
  H N_max vector releases, det-doubling switches C = 2, public cap
  N_max = ceil(d H log_C(1 + K/(d (lambda + lambda-tilde)))) (the sum over h of
  the per-step doubling counts [D]; the N_max of Sahu's public code,
  floor(d H log2(log(1 + K/(lambda-tilde d)))), does not have that form). With noise
  the switches follow a public schedule instead of the noisy test [D]
  (:func:`ngo_switch_schedule`; issue 31, D2).
* Private LSVI-UCB radius [D]: Jin's radius plus the regulariser bias of the
  shift, (H+1) sqrt(3 d lambda-tilde), plus the noise term Y / sqrt(lambda +
  lambda-tilde), Y a bound on the vector noise norm (standard private-ridge
  decomposition, Shariff & Sheffet 2018). It reduces to Jin's beta at rho = inf.
* LSVI-UCB++ and DP-LSVI-UCB++: :mod:`privaudit.online.linear.constants_pp` (the same two
  sets, the same :data:`PRACTICAL` multipliers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.linear.sensitivity import tree_gram_scale, vector_scale
from privaudit.online.counters import tree_levels
from privaudit.online.linear.numerics import goe_opnorm_bound, gauss_norm_bound
from privaudit.privacy.accounting import zcdp_to_dp_simple

#: The practical multipliers (applied to the theory values). Chosen once by a
#: coarse search at K = 10^4 on the synthetic linear MDP (experiments/
#: figure1_dp_lsvi_ucb_pp.py documents the run) and kept fixed.
PRACTICAL = {
    # multiplier of LSVI-UCB's beta (and of the private versions' radii) and of
    # LSVI-UCB++'s Bernstein radius (both ~ d H sqrt(iota) resp. sqrt(d) iota in theory)
    "beta": 0.005,
    # the ridge lambda of LSVI-UCB, Luyo and Ngo (a value, not a multiplier; theory: 1)
    "lam": 0.1,
    # multipliers of LSVI-UCB++'s Hoeffding and variance radii (~ d^1.5 H iota and d^1.5 H^2 iota)
    "beta_hoef": 2e-4,
    "beta_var": 2e-4,
    # multiplier of the eigenvalue shift 2 lambda-tilde and of the floor's lambda-tilde
    "shift": 0.25,
    # multiplier of Ngo's switch cap N_max (the theory cap sums d log2(.) over h)
    "n_max": 1.0,
    # multipliers of LSVI-UCB++'s 4 d^3 H^2 (D term) and 2 d^3 H^2 (sigma-bar floor term)
    "d_coef": 1e-6,
    "floor_coef": 1e-6,
    # DP-LSVI-UCB++ only: multiplier of the union-bound z of its per-(s, a) noise bonus
    # z sd(eta^T Lambda-tilde^-1 phi) (noise_z of dp_lsvi_ucb_pp_constants). 1 = not shrunk: the
    # target noise stays covered w.h.p., so the monotone Q-hat = min{new, old} is safe (issue 16)
    "noise_z": 1.0,
}

CONSTANT_SETS = ("theory", "practical")


@dataclass(frozen=True)
class Problem:
    """Public facts every constant depends on."""

    #: H.
    horizon: int
    #: S.
    n_states: int
    #: A.
    n_actions: int
    #: d.
    dim: int
    #: K, declared in advance (public).
    n_episodes: int
    #: p, failure probability of the confidence bounds (not a privacy parameter).
    fail_prob: float = 0.01

    def __post_init__(self):
        for name in ("horizon", "n_states", "n_actions", "dim", "n_episodes"):
            if int(getattr(self, name)) < 1:
                raise UsageError(f"`{name}` must be >= 1. Got {getattr(self, name)!r}.")
        if not 0 < self.fail_prob < 1:
            raise UsageError(f"`fail_prob` must be in (0, 1). Got {self.fail_prob!r}.")


@dataclass(frozen=True)
class JinConstants:
    """Constants of LSVI-UCB and its private versions (Luyo, Ngo)."""

    #: Ridge regulariser lambda.
    lam: float
    #: Bonus radius.
    beta: float
    #: Added to each released Gram matrix (2 lambda-tilde; 0 without noise).
    shift: float = 0.0
    #: Eigenvalue floor of a released Gram matrix (lambda + lambda-tilde).
    floor: float = 0.0
    #: Luyo: number of batches B (K for LSVI-UCB's update every episode).
    n_batches: int = 0
    #: Ngo: determinant ratio C of a switch (2 in the paper; 1 switches whenever det grows).
    switch_ratio: float = 2.0
    #: Ngo: public hard cap on the number of policy switches (with ``switch_at``: its length).
    n_max: int = 0
    #: GOE entry scale s of each Gram-tree node (0: none).
    noise_gram: float = 0.0
    #: Gaussian sigma of each target-vector release (0: none).
    noise_vec: float = 0.0
    #: ``"theory"``, ``"practical"`` or ``"custom"``.
    name: str = "custom"
    #: Ngo: the public switching schedule, the episodes k (users served) at which the policy is recomputed, fixed
    #: before the run (:func:`ngo_switch_schedule`); empty: the paper's determinant-doubling test on the released
    #: Gram matrices, capped at ``n_max``. A tuple of int.
    switch_at: tuple = ()


def check_set(which: str) -> None:
    """Raise :class:`UsageError` unless ``which`` is one of :data:`CONSTANT_SETS`."""
    if which not in CONSTANT_SETS:
        raise UsageError(f"`constants` must be one of {CONSTANT_SETS}. Got {which!r}.")


def multiplier(which: str, key: str) -> float:
    """The multiplier ``key`` of the set ``which``: 1 in theory, :data:`PRACTICAL` ``[key]`` in practice."""
    return 1.0 if which == "theory" else PRACTICAL[key]


def _jin_iota(pb: Problem) -> float:
    return math.log(2.0 * pb.dim * pb.n_episodes * pb.horizon / pb.fail_prob)


def _jin_lam(which: str) -> float:
    return 1.0 if which == "theory" else PRACTICAL["lam"]


def optimistic_radius(beta: float, which: str, horizon: int, diagonal: float) -> float:
    """The practical radius raised to keep optimism: max(beta, H sqrt(diagonal)). [D]

    An untried direction phi = e_i (one-hot features: an untried (s, a)) has ||phi||_{Lambda^-1} =
    1 / sqrt(diagonal), diagonal = lambda, so its index is
    beta / sqrt(diagonal) and must reach the value range H for the optimism the regret analysis rests
    on (Jin et al. 2020); the practical multipliers alone give 0.005 d H sqrt(iota) / sqrt(0.1),
    below H when d is small (issue 31, D1). The theory radius d H sqrt(iota) >= H sqrt(lambda) needs no floor.
    """
    return beta if which == "theory" else max(beta, horizon * math.sqrt(diagonal))


def lsvi_ucb_constants(pb: Problem, which: str = "theory") -> JinConstants:
    """LSVI-UCB (Jin et al. 2020): lambda = 1, beta = d H sqrt(iota) (x multiplier, floored: :func:`optimistic_radius`)."""
    check_set(which)
    lam = _jin_lam(which)
    beta = optimistic_radius(pb.dim * pb.horizon * math.sqrt(_jin_iota(pb)) * multiplier(which, "beta"), which,
                             pb.horizon, lam)
    return JinConstants(lam=lam, beta=beta, floor=lam, n_batches=pb.n_episodes,
                        switch_ratio=1.0, n_max=pb.n_episodes, name=which)


def _private_jin(pb: Problem, which: str, s_tree: float, levels: int, n_rel: int,
                 sigma_vec: float, n_vec: int) -> tuple[float, float, float]:
    """(shift, floor, beta) of a private LSVI-UCB with the given noise. [D]"""
    H, d, p = pb.horizon, pb.dim, pb.fail_prob
    lam_t = goe_opnorm_bound(s_tree * math.sqrt(levels), d, p / (3.0 * H * max(n_rel, 1)))
    y = gauss_norm_bound(sigma_vec, d, p / (3.0 * H * max(n_vec, 1)))
    lam_t *= multiplier(which, "shift")
    floor = _jin_lam(which) + lam_t
    beta = (d * H * math.sqrt(_jin_iota(pb)) + (H + 1) * math.sqrt(3.0 * d * lam_t)
            + y / math.sqrt(floor)) * multiplier(which, "beta")
    # without noise (rho = inf) floored as LSVI-UCB's, so that the private versions reduce to it; with noise
    # the radius is left as it was (flooring it there too changes the audit catalogue's broken Luyo, whose
    # negative targets the larger bonus hides: docs/online.md, "Constants")
    return 2.0 * lam_t, floor, beta if s_tree > 0 else optimistic_radius(beta, which, H, _jin_lam(which))


def luyo_batches(pb: Problem, rho: float, delta: float) -> int:
    """Luyo's B = ceil((K eps)^{2/5} d^{3/5} H^{1/5}), eps = rho + 2 sqrt(rho ln(1/delta)); K at rho = inf."""
    if math.isinf(rho):
        return pb.n_episodes
    eps = zcdp_to_dp_simple(rho, delta)
    b = math.ceil((pb.n_episodes * eps) ** 0.4 * pb.dim ** 0.6 * pb.horizon ** 0.2)
    return int(min(max(b, 1), pb.n_episodes))


def luyo_constants(pb: Problem, rho: float, which: str = "theory", *, delta: float = 1e-5,
                   n_batches: int | None = None) -> JinConstants:
    """Private LSVI-UCB through batching (Luyo et al. 2021).

    Parameters
    ----------
    rho : float
        Total zCDP budget (math.inf: no noise).
    delta : float
        Only sets eps in Luyo's batch count B.
    n_batches : int, optional
        Override B (public).

    Notes
    -----
    rho/2 to H binary trees over the B batch leaves (a user is one leaf per
    step), rho/2 to the H (n_boundaries) target-vector releases with targets
    r + V in [0, H + 1] (Delta_2 = 2 (H + 1) under replacement; docs/online.md).
    """
    check_set(which)
    B = int(n_batches) if n_batches is not None else luyo_batches(pb, rho, delta)
    if not 1 <= B <= pb.n_episodes:
        raise UsageError(f"`n_batches` must be in 1..K={pb.n_episodes}. Got {B}.")
    n_rel = luyo_boundaries(pb.n_episodes, B)
    if math.isinf(rho):
        s_tree = sigma = 0.0
    else:
        s_tree = tree_gram_scale(rho / 2, pb.horizon, B)
        sigma = vector_scale(rho / 2, pb.horizon * max(n_rel, 1), pb.horizon + 1)
    shift, floor, beta = _private_jin(pb, which, s_tree, tree_levels(B), max(n_rel, 1), sigma,
                                      max(n_rel, 1))
    return JinConstants(lam=_jin_lam(which), beta=beta, shift=shift, floor=floor, n_batches=B,
                        switch_ratio=1.0, n_max=pb.n_episodes, noise_gram=s_tree,
                        noise_vec=sigma, name=which)


def luyo_boundaries(n_episodes: int, n_batches: int) -> int:
    """Number of policy updates of the batch schedule: ceil(K / ceil(K/B)) - 1."""
    length = math.ceil(n_episodes / n_batches)
    return math.ceil(n_episodes / length) - 1


def ngo_switch_schedule(n_episodes: int, dim: int, base: float, switch_ratio: float) -> tuple:
    """Ngo's public switching schedule [D]: k_j = ceil(d b (C^{j/d} - 1)), j = 1, 2, ..., distinct, < K.

    The episodes at which the determinant-doubling test of Ngo, Vietri & Wu (2022, Algorithm 1) would fire
    if the data grew every direction alike: with k unit-norm features spread evenly over the d
    directions, det(b I + (k/d) I) = (b + k/d)^d reaches C^j b^d at k = d b (C^{j/d} - 1). The schedule
    is a function of public constants only (K, d, the public diagonal b = lambda + lambda-tilde of the
    release, C), so it reads no data and no release: it costs no privacy (docs/online.md, "Departures").
    It has about d log_C(1 + K / (d b)) points, the per-step count whose sum over the H steps is
    :func:`ngo_constants`' cap N_max; C = 1 switches at every episode.

    Parameters
    ----------
    n_episodes : int
        K (public).
    dim : int
        d.
    base : float
        b > 0, the public diagonal of a released Gram matrix before any data.
    switch_ratio : float
        C >= 1.

    Returns
    -------
    tuple of int
        The switch episodes, increasing, in 1..K-1 (k users served before the switch).
    """
    K = int(n_episodes)
    if switch_ratio <= 1.0:
        return tuple(range(1, K))
    n = math.floor(dim * math.log1p((K - 1) / (dim * base)) / math.log(switch_ratio)) + 1
    k = np.ceil(dim * base * np.expm1(np.arange(1, n + 1) * math.log(switch_ratio) / dim))
    return tuple(int(x) for x in np.unique(k[(k >= 1) & (k < K)]))


def ngo_constants(pb: Problem, rho: float, which: str = "theory", *, switch_ratio: float = 2.0,
                  n_max: int | None = None, switching: str | None = None) -> JinConstants:
    """Low-switching private LSVI-UCB (Ngo, Vietri & Wu 2022, Algorithm 1).

    Parameters
    ----------
    switching : {"schedule", "determinant"}, optional
        ``"schedule"`` (default with noise, finite rho): switch at the public episodes of
        :func:`ngo_switch_schedule` [D]; ``"determinant"`` (default at rho = inf): the paper's
        determinant-doubling test on the released Gram matrices, capped at N_max. With noise the
        test fires on noise alone (issue 31, D2: about 2.5 times as often as without noise; at
        eps = 1, H = 5 the cap was used up within the first third of the users and the policy froze).
    n_max : int, optional
        Cap on the switches (default: N_max below); with ``"schedule"`` the schedule is thinned to at
        most ``n_max`` of its points, evenly in index.

    Notes
    -----
    rho/2 to H binary trees over the K episodes (Gram released every episode),
    rho/2 to H n target-vector releases (targets in [0, H + 1]), n = the schedule's length, or the
    cap N_max = ceil(d H log_C(1 + K/(d b))) with the determinant test. Both are public and fixed
    before the run.

    Raises
    ------
    UsageError
        ``switch_ratio`` < 1, or an unknown ``switching``.
    """
    check_set(which)
    H, d, K, p = pb.horizon, pb.dim, pb.n_episodes, pb.fail_prob
    if not switch_ratio >= 1:
        raise UsageError(f"`switch_ratio` must be >= 1. Got {switch_ratio!r}.")
    if switching is None:
        switching = "determinant" if math.isinf(rho) else "schedule"
    if switching not in ("schedule", "determinant"):
        raise UsageError(f"`switching` must be 'schedule' or 'determinant'. Got {switching!r}.")
    s_tree = 0.0 if math.isinf(rho) else tree_gram_scale(rho / 2, H, K)
    lam_t = goe_opnorm_bound(s_tree * math.sqrt(tree_levels(K)), d, p / (3.0 * H * K))
    base = _jin_lam(which) + lam_t * multiplier(which, "shift")
    schedule: tuple = ()
    if switching == "schedule":
        schedule = ngo_switch_schedule(K, d, base, switch_ratio)
        if n_max is not None and 0 < int(n_max) < len(schedule):
            idx = np.unique(np.round(np.linspace(0, len(schedule) - 1, int(n_max))).astype(int))
            schedule = tuple(schedule[i] for i in idx)
        n_max = len(schedule)
    elif n_max is None:
        per_h = d * math.log(1.0 + K / (d * base)) / math.log(max(switch_ratio, 1.0 + 1e-12))
        n_max = math.ceil(H * per_h * multiplier(which, "n_max"))
    n_max = int(min(max(int(n_max), 1), K))
    sigma = 0.0 if math.isinf(rho) else vector_scale(rho / 2, H * n_max, H + 1)
    shift, floor, beta = _private_jin(pb, which, s_tree, tree_levels(K), K, sigma, n_max)
    return JinConstants(lam=_jin_lam(which), beta=beta, shift=shift, floor=floor, n_batches=K,
                        switch_ratio=float(switch_ratio), n_max=n_max, noise_gram=s_tree,
                        noise_vec=sigma, name=which, switch_at=schedule)
