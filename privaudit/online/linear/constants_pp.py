"""The constants of LSVI-UCB++ and DP-LSVI-UCB++: the *theory* and *practical* sets of
:mod:`privaudit.online.linear.constants` (notation, sets and multipliers there).

Sources
-------
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

from privaudit.core.errors import UsageError
from privaudit.online.linear.constants import PRACTICAL, Problem, check_set, multiplier
from privaudit.online.linear.numerics import gauss_norm_bound, goe_opnorm_bound
from privaudit.online.linear.sensitivity import gauss_scale, goe_scale, gram_sensitivity, target_sensitivity


@dataclass(frozen=True)
class PlusPlusConstants:
    """Constants of LSVI-UCB++ and DP-LSVI-UCB++.

    Attributes
    ----------
    lam, shift, floor : float
        As in :class:`privaudit.online.linear.constants.JinConstants`.
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



def _plusplus(pb: Problem, which: str, sigma_min: float, lam_t: float, l_v: float,
              l_v2: float) -> PlusPlusConstants:
    H, d, K, p = pb.horizon, pb.dim, pb.n_episodes, pb.fail_prob
    lam = 1.0 / H ** 2
    lam_t = lam_t * multiplier(which, "shift")
    lmin, lmax = lam + lam_t, lam + 3.0 * lam_t
    iota = math.log(d * H * K / (p * lmin))
    bern = (H * math.sqrt(d * lmax) + l_v / math.sqrt(lmin) + math.sqrt(d) * iota) * multiplier(which, "beta")
    hoef = ((H * math.sqrt(d * lmax) + l_v / math.sqrt(lmin) + math.sqrt(d ** 3 * H ** 2) * iota)
            * multiplier(which, "beta_hoef"))
    var = ((H ** 2 * math.sqrt(d * lmax) + l_v2 / math.sqrt(lmin) + math.sqrt(d ** 3 * H ** 4) * iota)
           * multiplier(which, "beta_var"))
    return PlusPlusConstants(lam=lam, beta_bern=bern, beta_hoef=hoef, beta_var=var,
                             sigma_min=sigma_min, d_coef=4.0 * d ** 3 * H ** 2 * multiplier(which, "d_coef"),
                             d_cap=float(d ** 3 * H ** 3),
                             floor_coef=2.0 * d ** 3 * H ** 2 * multiplier(which, "floor_coef"),
                             shift=2.0 * lam_t, floor=lmin, name=which)


def lsvi_ucb_pp_constants(pb: Problem, which: str = "theory", *,
                          sigma_min: float | None = None) -> PlusPlusConstants:
    """LSVI-UCB++ (He et al. 2023). sigma_min defaults to sqrt(H) (theory) or H (practical)."""
    check_set(which)
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
    check_set(which)
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
