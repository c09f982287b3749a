"""Every constant of the linear explorers, in one place: a *theory* and a *practical* set.

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
* LSVI-UCB++: He, Zhao, Zhou & Gu, ICML 2023, Algorithm 1: lambda = 1/H^2,
  Bernstein radius beta = H sqrt(d lambda) + sqrt(d) iota, Hoeffding radius
  beta-bar = H sqrt(d lambda) + sqrt(d^3 H^2) iota, variance radius
  beta-tilde = H^2 sqrt(d lambda) + sqrt(d^3 H^4) iota, iota = ln(d H K/(p lambda));
  sigma-bar = max{sigma, sigma_min, 2 d^3 H^2 ||phi||^{1/2}}, D = min{4 d^3 H^2 (.), d^3 H^3}.
  sigma_min = sqrt(H) (what the proofs use, sigma-bar^-1 <= 1/sqrt(H); Tan, Fan &
  Wei 2024, Appendix A, note that the algorithm's H is a typo).
* DP-LSVI-UCB++ (Sahu 2025, Algorithm 1): the same radii with lambda replaced by the private
  regulariser (bias term with lambda + 3 lambda-tilde) plus the noise terms
  L / sqrt(lambda + lambda-tilde), L (L2 for the squared values) a bound on the
  vector noise norms. [D] departure: Sahu 2025 writes H L sqrt(d lambda-tilde)
  (the radii of Theorem 3.2), multiplying the noise bound by sqrt(lambda-tilde) where the ridge
  error ``||eta||_{Lambda^-1} <= L / sqrt(lambda_min)`` divides by it.
  sigma_min = H (Sahu 2025, Algorithm 1 line 25 and the definition of sigma-bar in
  Section 3; its noise calibration assumes it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.linear.sensitivity import (gram_sensitivity, target_sensitivity, goe_scale,
                                                 gauss_scale, tree_gram_scale, vector_scale)
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
    """Public facts every constant depends on.

    Attributes
    ----------
    horizon, n_states, n_actions, dim : int
        H, S, A, d.
    n_episodes : int
        K, declared in advance (public).
    fail_prob : float
        p, failure probability of the confidence bounds (not a privacy parameter).
    """

    horizon: int
    n_states: int
    n_actions: int
    dim: int
    n_episodes: int
    fail_prob: float = 0.01

    def __post_init__(self):
        for name in ("horizon", "n_states", "n_actions", "dim", "n_episodes"):
            if int(getattr(self, name)) < 1:
                raise UsageError(f"`{name}` must be >= 1. Got {getattr(self, name)!r}.")
        if not 0 < self.fail_prob < 1:
            raise UsageError(f"`fail_prob` must be in (0, 1). Got {self.fail_prob!r}.")


@dataclass(frozen=True)
class JinConstants:
    """Constants of LSVI-UCB and its private versions (Luyo, Ngo).

    Attributes
    ----------
    lam : float
        Ridge regulariser lambda.
    beta : float
        Bonus radius.
    shift : float
        Added to each released Gram matrix (2 lambda-tilde; 0 without noise).
    floor : float
        Eigenvalue floor of a released Gram matrix (lambda + lambda-tilde).
    n_batches : int
        Luyo: number of batches B (K for LSVI-UCB's update every episode).
    switch_ratio : float
        Ngo: determinant ratio C of a switch (2 in the paper; 1 switches whenever det grows).
    n_max : int
        Ngo: public hard cap on the number of policy switches (with ``switch_at``: its length).
    switch_at : tuple of int
        Ngo: the public switching schedule, the episodes k (users served) at which the policy is
        recomputed, fixed before the run (:func:`ngo_switch_schedule`); empty: the paper's
        determinant-doubling test on the released Gram matrices, capped at ``n_max``.
    noise_gram : float
        GOE entry scale s of each Gram-tree node (0: none).
    noise_vec : float
        Gaussian sigma of each target-vector release (0: none).
    name : str
        ``"theory"``, ``"practical"`` or ``"custom"``.
    """

    lam: float
    beta: float
    shift: float = 0.0
    floor: float = 0.0
    n_batches: int = 0
    switch_ratio: float = 2.0
    n_max: int = 0
    noise_gram: float = 0.0
    noise_vec: float = 0.0
    name: str = "custom"
    switch_at: tuple = ()


@dataclass(frozen=True)
class PlusPlusConstants:
    """Constants of LSVI-UCB++ and DP-LSVI-UCB++.

    Attributes
    ----------
    lam, shift, floor : float
        As in :class:`JinConstants`.
    beta_bern, beta_hoef, beta_var : float
        He et al.'s beta (Bernstein), beta-bar (Hoeffding) and beta-tilde
        (variance); Sahu 2025 calls them beta, beta-hat = beta-check, beta-bar.
    optimistic : {"bernstein", "hoeffding"}
        Radius of the optimistic Q: He et al. and Sahu 2025's regret proof
        (Lemma C.5) use the Bernstein one, Sahu's Algorithm 1 line 11 beta-hat.
    sigma_min : float
        Variance floor of sigma-bar (weights <= 1/sigma_min^2).
    d_coef, d_cap, floor_coef : float
        4 d^3 H^2, d^3 H^3 and 2 d^3 H^2 of the D term and sigma-bar.
    noise_gram : float
        GOE entry scale of each (k, h) Gram release (0: none).
    noise_v, noise_v2 : float
        Gaussian sigma of each (k, h) release of the V (and V-check) and V^2 targets.
    switch_margin : float
        Nats added to ln 2 in the determinant-doubling switch test (0: the papers' test).
    monotone : bool
        Q-hat = min{new, previous} and Q-check = max{new, previous} at a switch
        (He et al.; Sahu 2025, Algorithm 1 lines 11-12); False: the new estimate (clipped).
    noise_z : float
        Adds ``noise_z * noise_v * ||Lambda-tilde^-1 phi||_2`` (noise_z standard deviations of the
        target noise's part of w^T phi) to the optimistic bonus and subtracts it from the pessimistic one.
    name : str
    """

    lam: float
    beta_bern: float
    beta_hoef: float
    beta_var: float
    sigma_min: float
    d_coef: float
    d_cap: float
    floor_coef: float
    shift: float = 0.0
    floor: float = 0.0
    optimistic: str = "bernstein"
    noise_gram: float = 0.0
    noise_v: float = 0.0
    noise_v2: float = 0.0
    switch_margin: float = 0.0
    monotone: bool = True
    noise_z: float = 0.0
    name: str = "custom"

    @property
    def w_max(self) -> float:
        """Largest weight sigma-bar^{-2} = 1/sigma_min^2 (sets the sensitivities)."""
        return 1.0 / self.sigma_min ** 2


def _check_set(which: str) -> float:
    if which not in CONSTANT_SETS:
        raise UsageError(f"`constants` must be one of {CONSTANT_SETS}. Got {which!r}.")
    return 1.0 if which == "theory" else None


def _m(which: str, key: str) -> float:
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
    _check_set(which)
    lam = _jin_lam(which)
    beta = optimistic_radius(pb.dim * pb.horizon * math.sqrt(_jin_iota(pb)) * _m(which, "beta"), which,
                             pb.horizon, lam)
    return JinConstants(lam=lam, beta=beta, floor=lam, n_batches=pb.n_episodes,
                        switch_ratio=1.0, n_max=pb.n_episodes, name=which)


def _private_jin(pb: Problem, which: str, s_tree: float, levels: int, n_rel: int,
                 sigma_vec: float, n_vec: int) -> tuple[float, float, float]:
    """(shift, floor, beta) of a private LSVI-UCB with the given noise. [D]"""
    H, d, p = pb.horizon, pb.dim, pb.fail_prob
    lam_t = goe_opnorm_bound(s_tree * math.sqrt(levels), d, p / (3.0 * H * max(n_rel, 1)))
    y = gauss_norm_bound(sigma_vec, d, p / (3.0 * H * max(n_vec, 1)))
    lam_t *= _m(which, "shift")
    floor = _jin_lam(which) + lam_t
    beta = (d * H * math.sqrt(_jin_iota(pb)) + (H + 1) * math.sqrt(3.0 * d * lam_t)
            + y / math.sqrt(floor)) * _m(which, "beta")
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
    _check_set(which)
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
    _check_set(which)
    H, d, K, p = pb.horizon, pb.dim, pb.n_episodes, pb.fail_prob
    if not switch_ratio >= 1:
        raise UsageError(f"`switch_ratio` must be >= 1. Got {switch_ratio!r}.")
    if switching is None:
        switching = "determinant" if math.isinf(rho) else "schedule"
    if switching not in ("schedule", "determinant"):
        raise UsageError(f"`switching` must be 'schedule' or 'determinant'. Got {switching!r}.")
    s_tree = 0.0 if math.isinf(rho) else tree_gram_scale(rho / 2, H, K)
    lam_t = goe_opnorm_bound(s_tree * math.sqrt(tree_levels(K)), d, p / (3.0 * H * K))
    base = _jin_lam(which) + lam_t * _m(which, "shift")
    schedule: tuple = ()
    if switching == "schedule":
        schedule = ngo_switch_schedule(K, d, base, switch_ratio)
        if n_max is not None and 0 < int(n_max) < len(schedule):
            idx = np.unique(np.round(np.linspace(0, len(schedule) - 1, int(n_max))).astype(int))
            schedule = tuple(schedule[i] for i in idx)
        n_max = len(schedule)
    elif n_max is None:
        per_h = d * math.log(1.0 + K / (d * base)) / math.log(max(switch_ratio, 1.0 + 1e-12))
        n_max = math.ceil(H * per_h * _m(which, "n_max"))
    n_max = int(min(max(int(n_max), 1), K))
    sigma = 0.0 if math.isinf(rho) else vector_scale(rho / 2, H * n_max, H + 1)
    shift, floor, beta = _private_jin(pb, which, s_tree, tree_levels(K), K, sigma, n_max)
    return JinConstants(lam=_jin_lam(which), beta=beta, shift=shift, floor=floor, n_batches=K,
                        switch_ratio=float(switch_ratio), n_max=n_max, noise_gram=s_tree,
                        noise_vec=sigma, name=which, switch_at=schedule)


def _plusplus(pb: Problem, which: str, sigma_min: float, lam_t: float, l_v: float,
              l_v2: float) -> PlusPlusConstants:
    H, d, K, p = pb.horizon, pb.dim, pb.n_episodes, pb.fail_prob
    lam = 1.0 / H ** 2
    lam_t = lam_t * _m(which, "shift")
    lmin, lmax = lam + lam_t, lam + 3.0 * lam_t
    iota = math.log(d * H * K / (p * lmin))
    bern = (H * math.sqrt(d * lmax) + l_v / math.sqrt(lmin) + math.sqrt(d) * iota) * _m(which, "beta")
    hoef = ((H * math.sqrt(d * lmax) + l_v / math.sqrt(lmin) + math.sqrt(d ** 3 * H ** 2) * iota)
            * _m(which, "beta_hoef"))
    var = ((H ** 2 * math.sqrt(d * lmax) + l_v2 / math.sqrt(lmin) + math.sqrt(d ** 3 * H ** 4) * iota)
           * _m(which, "beta_var"))
    return PlusPlusConstants(lam=lam, beta_bern=bern, beta_hoef=hoef, beta_var=var,
                             sigma_min=sigma_min, d_coef=4.0 * d ** 3 * H ** 2 * _m(which, "d_coef"),
                             d_cap=float(d ** 3 * H ** 3),
                             floor_coef=2.0 * d ** 3 * H ** 2 * _m(which, "floor_coef"),
                             shift=2.0 * lam_t, floor=lmin, name=which)


def lsvi_ucb_pp_constants(pb: Problem, which: str = "theory", *,
                          sigma_min: float | None = None) -> PlusPlusConstants:
    """LSVI-UCB++ (He et al. 2023). sigma_min defaults to sqrt(H) (theory) or H (practical)."""
    _check_set(which)
    if sigma_min is None:
        sigma_min = math.sqrt(pb.horizon) if which == "theory" else float(pb.horizon)
    return _plusplus(pb, which, float(sigma_min), 0.0, 0.0, 0.0)


def dp_lsvi_ucb_pp_constants(pb: Problem, rho: float, which: str = "theory", *,
                             sigma_min: float | None = None) -> PlusPlusConstants:
    """DP-LSVI-UCB++ (Sahu 2025, Algorithm 1, corrected as docs/online.md says).

    Notes
    -----
    rho_0 = rho / (4 H K) per released statistic, fresh for every (k, h): the
    Gram matrix (GOE, Delta_F = sqrt(2) w_max), the V and V-check targets
    (Delta = 2 H w_max) and the V^2 target (Delta = 2 H^2 w_max), with
    w_max = 1/sigma_min^2. sigma_min = H in both sets (Sahu 2025, Algorithm 1 line 25).

    **practical** [D] (issue 16): the radii get the multipliers of :data:`PRACTICAL`
    like LSVI-UCB++'s, *except* the target noise, which stays covered at full
    strength through ``noise_z = sqrt(2 ln(K H S A / p))`` standard deviations of
    each cell's noise term ``eta^T Lambda-tilde_{k,h}^-1 phi(s, a)`` (given the
    released Gram matrix it is N(0, noise_v^2 ||Lambda-tilde^-1 phi||^2): the
    Gaussian tail and a union bound over the K H S A (k, h, s, a) cells give
    probability <= p/2 that any optimistic estimate is pushed down by the noise
    beyond the bonus, and <= p/2 for the pessimistic ones). Without it (the
    multiplier 0.005 also shrank the noise part) every estimate fell below the
    previous Q-hat with probability near 1/2 at each of the ~K noisy switches, and
    the monotone update min{new, old} drove Q-hat to 0 in every cell within a few
    hundred users at any budget: measured in ``experiments/dp_lsvi_ucb_pp_collapse.py``
    and docs/online.md. The theory set keeps the norm bound L / sqrt(lambda_min) of
    Sahu's radius instead (noise_z = 0). noise_z = 0 at rho = inf (no noise).
    """
    _check_set(which)
    H, d, K, p = pb.horizon, pb.dim, pb.n_episodes, pb.fail_prob
    if sigma_min is None:
        sigma_min = float(H)
    w_max = 1.0 / float(sigma_min) ** 2
    if math.isinf(rho):
        s = sv = sv2 = 0.0
    else:
        if not rho > 0:
            raise UsageError(f"`rho` must be > 0. Got {rho!r}.")
        rho0 = rho / (4.0 * H * K)
        s = goe_scale(gram_sensitivity(w_max), rho0)
        sv = gauss_scale(target_sensitivity(H, w_max), rho0)
        sv2 = gauss_scale(target_sensitivity(H ** 2, w_max), rho0)
    fail = p / (3.0 * H * K)
    c = _plusplus(pb, which, float(sigma_min), goe_opnorm_bound(s, d, fail),
                  gauss_norm_bound(sv, d, fail), gauss_norm_bound(sv2, d, fail))
    z = 0.0
    if which == "practical" and sv > 0:
        z = noise_union_z(K * H * pb.n_states * pb.n_actions, p) * PRACTICAL["noise_z"]
    return replace(c, noise_gram=s, noise_v=sv, noise_v2=sv2, noise_z=z)


def noise_union_z(n_cells: int, fail_prob: float) -> float:
    """z = sqrt(2 ln(n_cells / fail_prob)): P(some of n_cells N(0, 1) draws exceeds z) <= fail_prob / 2.

    The Gaussian tail P(N(0, 1) > z) <= exp(-z^2 / 2) / 2 (z >= 0) and a union bound
    over the cells. DP-LSVI-UCB++'s practical noise bonus (issue 16).

    Raises
    ------
    UsageError
        ``n_cells`` < 1 or ``fail_prob`` not in (0, 1).
    """
    if int(n_cells) < 1 or not 0 < fail_prob < 1:
        raise UsageError(f"`n_cells` must be >= 1 and `fail_prob` in (0, 1). Got {n_cells!r}, {fail_prob!r}.")
    return math.sqrt(2.0 * math.log(int(n_cells) / fail_prob))
