"""DP-VAPVI's privacy: sensitivities, the lattice, the 5H discrete Gaussian releases, E, L, D, the guarantee.

Neighbouring relation: substitution of one privacy unit (one trajectory when
k = 1; Qiao & Wang 2023 "replace one trajectory"). Each of the 5 statistics of step h
is released with the Gaussian mechanism at rho_0 = rho / (5H) zCDP, so the
5H releases compose to rho-zCDP (adaptive composition; Qiao & Wang 2023,
section 4; docs/linear.md, "Privacy"). sigma_h and V_{h+1} are computed from releases of steps
> h only (post-processing), which makes the sensitivities below valid.

Sensitivities under substitution, with ||phi|| <= 1, r in [0, 1], sigma^2 >= 1,
0 <= V_{h+1} <= H - h - 1 (0-based; the paper's H - h) and k episodes per unit
(each episode has at most one row at step h, so one unit moves at most k terms):

* V^2 statistic  sum phi V^2:          ||phi V^2 - psi V'^2|| <= H^2 + H^2 = 2H^2 (times k).
* V statistic    sum phi V:             <= 2H (times k).
* (r + V)/sigma^2 statistic:            r + V <= H and sigma^2 >= 1, so <= 2H (times k).
* Gram matrices  sum phi phi^T (/sigma^2): ||phi phi^T - psi psi^T||_F^2
  = ||phi||^4 + ||psi||^4 - 2 (phi.psi)^2 <= 2, so Frobenius sensitivity sqrt(2)
  (times k); the weighted Gram uses phi/sigma with ||phi/sigma|| <= 1.

Noise (per statistic, per step, drawn fresh: a departure from Algorithm 2,
whose line 1 draws once; docs/linear.md, "Fresh noise per h"),
the paper's Gaussians with these variances:

* phi_1: (2H^2 k)^2 / (2 rho_0) = 2 H^4 k^2 / rho_0 per coordinate;
* phi_2, phi_3: 2 H^2 k^2 / rho_0 per coordinate;
* K_1, K_2 = (E/2) I + N, N symmetric with independent entries of variance
  s^2 = k^2 / (2 rho_0) off the diagonal and 2 s^2 on it (the law of
  (Z + Z^T)/sqrt(2), Z_ij ~ N(0, s^2)). For a symmetric shift Delta the zCDP
  cost is ||Delta||_F^2 / (4 s^2); with ||Delta||_F^2 <= 2 k^2 this is rho_0. The paper's s^2 = 1/(4 rho_0) is calibrated for ||Delta||_F <= 1,
  i.e. add/remove of one trajectory; under substitution it would cost 2 rho_0
  per matrix and 1.4 rho in total (docs/linear.md, "Matrix noise calibrated for substitution").

E and L follow Qiao & Wang (2023)'s notation list (section 8.2, with rho_0 = rho/(5H)):
E = sqrt(2d/rho_0) (2 + (log(5 c1 H / delta_f) / (c2 d))^(2/3)) and
L = 2H sqrt(d log(10 H d / delta_f) / rho_0), where delta_f is a failure
probability (not the DP delta). We multiply E by k*sqrt(2) (our matrix noise
standard deviation is k*sqrt(2) times the paper's, so 0 <= K_i <= E I keeps the
paper's margin) and L by k (the vector noise scales with k).

Fixed point (issue 10: no float side channel). Float statistics plus float
noise leak through their low-order bits, and numpy's float samplers are not
the continuous laws the accounting assumes. So every input of a statistic
is first put on a power-of-two grid (``grid()``: phi toward zero to 2^-12,
V_{h+1}, V_{h+1}^2 and each row's reward to the nearest 2^-8, 1/sigma^2 to the
nearest 2^-12), which keeps every bound above (||phi|| <= 1 and phi phi^T
positive semi-definite; the scalar bounds have integer ends, grid points);
each statistic is then an exact integer multiple of 2^-L (``LATTICE_BITS``),
summed in exact integer arithmetic, and the noise is the exact discrete
Gaussian on those integers with the variances above times 4^L, as exact
rationals of rho (``lattice_variances``). The discrete Gaussian costs
Delta^2 / (2 sigma^2) like the continuous one (CKS 2020 Thm 14, independent
coordinates), so the guarantee is exactly rho-zCDP; everything after (the
(E/2) I and lambda I, inverses, w, Q, the policy) is post-processing of
integers. The sensitivities are checked by brute force on the lattice
(tests/test_linear_privacy.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privaudit.core.artifact import Guarantee
from privaudit.core.envelope import envelope
from privaudit.core.errors import UsageError
from privaudit.learners.linear.data import REWARD_BITS
from privaudit.privacy.fixed_point import discrete_gaussian_batch, to_grid_nearest, to_grid_toward_zero
from privaudit.privacy.budget import Budget
from privaudit.privacy.events import ComposedEvent, GaussianEvent, Neighbouring, PrivacyUnit, SelfComposedEvent


@dataclass(frozen=True)
class DPVAPVINoiseScales:
    """Noise scales of DP-VAPVI for one run (all public).

    Attributes
    ----------
    rho0 : float
        Per-statistic zCDP budget rho / (5H).
    sigma_v2, sigma_v, sigma_r : float
        Standard deviations (per coordinate) of phi_1, phi_2, phi_3.
    sigma_z : float
        Standard deviation of the entries of Z in K_i.
    E : float
        Shift constant: K_i = (E/2) I + (Z + Z^T)/sqrt(2).
    L : float
        High-probability bound on ||phi_2||, ||phi_3|| (||phi_1|| <= H L).
    rho : float
        The total budget (exact; the lattice noise variances are exact rationals of it).
    H, k : int
        Horizon and episodes per unit.
    """

    rho0: float
    sigma_v2: float
    sigma_v: float
    sigma_r: float
    sigma_z: float
    E: float
    L: float
    rho: float
    H: int
    k: int


def sensitivities(H: int, k: int = 1) -> dict:
    """l2 / Frobenius sensitivities of the 5 statistics of one step under substitution.

    Parameters
    ----------
    H : int
        Horizon.
    k : int
        Most episodes per privacy unit.

    Returns
    -------
    dict
        ``v2`` 2H^2 k, ``v`` 2H k, ``r_plus_v`` 2H k, ``gram`` sqrt(2) k,
        ``weighted_gram`` sqrt(2) k (module docstring for the proofs).
    """
    return {"v2": 2.0 * H**2 * k, "v": 2.0 * H * k, "r_plus_v": 2.0 * H * k,
            "gram": np.sqrt(2.0) * k, "weighted_gram": np.sqrt(2.0) * k}


def noise_scales(rho: float, H: int, d: int, k: int = 1, delta_fail: float = 0.05,
                 c1: float = 1.0, c2: float = 1.0) -> DPVAPVINoiseScales:
    """Gaussian scales for rho-zCDP over the 5H releases (Qiao & Wang 2023, Algorithm 2, line 1; substitution).

    Parameters
    ----------
    rho : float
        Total zCDP budget, > 0.
    H, d, k : int
        Horizon, feature dimension, episodes per unit.
    delta_fail : float
        Failure probability in E and L (not the DP delta), in (0, 1).
    c1, c2 : float
        The GOE tail-bound constants of E (not given by the paper; 1 by default, [R]).

    Returns
    -------
    DPVAPVINoiseScales

    Raises
    ------
    UsageError
        If rho <= 0, k < 1, or delta_fail not in (0, 1).
    """
    if not (rho > 0 and np.isfinite(rho)):
        raise UsageError(f"`rho` must be a finite number > 0. Got {rho}.")
    if k < 1:
        raise UsageError(f"`k` (episodes per unit) must be >= 1. Got {k}.")
    if not 0 < delta_fail < 1:
        raise UsageError(f"`delta_fail` must lie in (0, 1). Got {delta_fail}.")
    rho0 = rho / (5 * H)
    sens = sensitivities(H, k)
    exact_rho0 = Fraction(float(rho)) / (5 * H)
    E = np.sqrt(2) * k * np.sqrt(2 * d / rho0) * (2 + (np.log(5 * c1 * H / delta_fail) / (c2 * d)) ** (2 / 3))
    L = k * 2 * H * np.sqrt(d * np.log(10 * H * d / delta_fail) / rho0)
    return DPVAPVINoiseScales(rho0=rho0, sigma_v2=sigma_within(sens["v2"], exact_rho0),
                              sigma_v=sigma_within(sens["v"], exact_rho0),
                              sigma_r=sigma_within(sens["r_plus_v"], exact_rho0),
                              sigma_z=sigma_within(float(k), exact_rho0),
                              E=float(E), L=float(L), rho=float(rho), H=int(H), k=int(k))


def sigma_within(l2: float, rho0: Fraction) -> float:
    """The smallest double sigma whose Gaussian cost l2^2 / (2 sigma^2) is at most ``rho0``, exactly.

    The noise is drawn with variance exactly ``Fraction(sigma)^2`` (times the
    lattice's 4^L, :func:`lattice_variances`), so the event recorded with this
    sigma is the mechanism itself: its exact rational cost (what the
    accountant computes) is at most rho0, with no floating-point slack
    (Bun & Steinke 2016, Prop. 1.6; CKS 2020 Thm 14 for the discrete Gaussian).
    """
    target = Fraction(l2) ** 2 / (2 * rho0)  # sigma^2 that costs exactly rho0
    s = float(np.sqrt(float(target)))
    while Fraction(s) ** 2 < target:  # round up until the cost fits
        s = float(np.nextafter(s, np.inf))
    while Fraction(float(np.nextafter(s, 0.0))) ** 2 >= target:  # the smallest such double
        s = float(np.nextafter(s, 0.0))
    return s


def d_constant(H: int, d: int, kappa: float | None, scales: DPVAPVINoiseScales | None) -> float:
    """D of line 11 with every O~ constant 1: H^2 L/kappa + H^4 E sqrt(d)/kappa^1.5 + 2 H^3 sqrt(d).

    The last term is written 2 H^3 sqrt(d) so that D reduces to VAPVI's additive
    term (docs/linear.md, "PEVI and VAPVI": our inference) without noise (``scales`` None). ``kappa`` is a
    public coverage constant from the user (it must not be computed from the
    logs); it is required when ``scales`` is given.

    Raises
    ------
    UsageError
        If ``scales`` is given and ``kappa`` is missing or <= 0.
    """
    base = 2.0 * H**3 * np.sqrt(d)
    if scales is None:
        return float(base)
    if kappa is None or not kappa > 0:
        raise UsageError(f"`kappa` (public coverage constant > 0) is needed for the D term when d_scale > 0. Got {kappa}.")
    return float(H**2 * scales.L / kappa + H**4 * scales.E * np.sqrt(d) / kappa**1.5 + base)




# ----------------------------------------------------------------------------
# fixed-point lattice and exact discrete Gaussian noise (no float side channel)

#: phi is rounded toward zero to multiples of 2^-FEATURE_BITS (so ||phi|| <= 1 still holds).
FEATURE_BITS = 12
#: V_{h+1}, V_{h+1}^2 and rewards are rounded to the nearest multiple of 2^-VALUE_BITS (their bounds
#: [0, B] have integer ends, so they hold on the grid).
VALUE_BITS = REWARD_BITS
#: 1/sigma^2 is rounded to the nearest multiple of 2^-WEIGHT_BITS (stays in [0, 1]).
WEIGHT_BITS = 12
#: Each statistic is an integer multiple of 2^-LATTICE_BITS[name] (products of the grids above).
LATTICE_BITS = {"gram": 2 * FEATURE_BITS, "v2": FEATURE_BITS + VALUE_BITS, "v": FEATURE_BITS + VALUE_BITS,
                "weighted_gram": 2 * FEATURE_BITS + WEIGHT_BITS,
                "r_plus_v": FEATURE_BITS + WEIGHT_BITS + VALUE_BITS}
_MATRICES = ("gram", "weighted_gram")
_VECTORS = ("v2", "v", "r_plus_v")
_SENS_KEY = {"v2": "v2", "v": "v", "r_plus_v": "r_plus_v"}


def grid() -> dict:
    """The grids of DP-VAPVI's statistics, as recorded in the policy manifest (JSON-ready)."""
    return {
        "features": f"2^-{FEATURE_BITS}, toward zero (||phi|| <= 1 kept)",
        "values_and_rewards": f"2^-{VALUE_BITS}, nearest (V_(h+1), V_(h+1)^2 and each row's reward, before any sum)",
        "weights_1_over_sigma2": f"2^-{WEIGHT_BITS}, nearest",
        "statistics": {name: f"2^-{bits}" for name, bits in LATTICE_BITS.items()},
        "noise": "exact discrete Gaussian on the integer multiples (CKS 2020 Alg. 3; "
                 "privacy.fixed_point.discrete_gaussian_wide)",
    }


def lattice_variances(scales: DPVAPVINoiseScales) -> dict:
    """Exact noise variances in lattice units, as Fractions (the guarantee's exact arithmetic).

    Vectors: sigma^2 * 4^L; matrices: (off-diagonal, diagonal) = (s^2, 2 s^2)
    * 4^L with s = ``sigma_z``: the squares of the recorded (double) sigmas,
    exactly. Each sigma is the smallest double whose cost Delta^2 / (2 sigma^2)
    is at most rho_0 = rho / (5H) (:func:`sigma_within`), so the noise drawn is
    exactly what the privacy event records and each statistic costs at most
    rho_0, exactly (module docstring; the lattice scales Delta and sigma alike).
    """
    sigma = {"v2": scales.sigma_v2, "v": scales.sigma_v, "r_plus_v": scales.sigma_r}
    out = {}
    for name, bits in LATTICE_BITS.items():
        unit = Fraction(4) ** bits
        if name in _MATRICES:
            s2 = Fraction(scales.sigma_z) ** 2 * unit
            out[name] = (s2, 2 * s2)
        else:
            out[name] = Fraction(sigma[name]) ** 2 * unit
    return out


def draw_step_noise(rng: np.random.Generator, d: int, scales: DPVAPVINoiseScales,
                    n_runs: int | None = None) -> dict:
    """Fresh exact noise for the 5 statistics of one step h, in lattice units (int64).

    Parameters
    ----------
    rng : numpy.random.Generator
        The step's own child stream (``rng.spawn``): never shared between steps.
    d : int
        Feature dimension.
    scales : DPVAPVINoiseScales
    n_runs : int, optional
        Draw n_runs independent sets at once (leading axis; the auditor's batched runs).

    Returns
    -------
    dict
        ``gram``, ``weighted_gram`` (d, d) symmetric (independent upper triangle,
        diagonal with twice the variance: the law of (Z + Z^T)/sqrt(2) on the
        lattice), ``v2``, ``v``, ``r_plus_v`` (d,); int64, leading n_runs axis when given.
    """
    var = lattice_variances(scales)
    lead = () if n_runs is None else (int(n_runs),)
    iu = np.triu_indices(d, 1)
    names = ("gram", "v2", "v", "weighted_gram", "r_plus_v")  # fixed order: reproducible streams
    groups = []
    for name in names:
        if name in _MATRICES:
            groups += [(var[name][0], lead + (len(iu[0]),)), (var[name][1], lead + (d,))]
        else:
            groups.append((var[name], lead + (d,)))
    draws = iter(discrete_gaussian_batch(groups, rng=rng))  # one vectorized pass for the step
    out = {}
    for name in names:
        if name in _MATRICES:
            off, diag = next(draws), next(draws)
            M = np.zeros(lead + (d, d), dtype=np.int64)
            M[..., iu[0], iu[1]] = off
            M = M + np.swapaxes(M, -1, -2)
            M[..., np.arange(d), np.arange(d)] = diag
            out[name] = M
        else:
            out[name] = next(draws)
    return out


def _exact_ints(x, what: str) -> np.ndarray:
    """float64 array holding integers below 2^53 -> int64; a privacy invariant, so it raises."""
    x = np.asarray(x)
    if x.dtype.kind in "iu":
        return x.astype(np.int64)
    if x.size and (np.abs(x).max() >= 2.0**53 or not np.array_equal(x, np.round(x))):
        raise RuntimeError(f"DP-VAPVI lattice: {what} is not an exact integer multiple of its grid; report this.")
    return x.astype(np.int64)


def _lattice_sum(subscripts_float, q: np.ndarray, w: np.ndarray, per_unit: int, what: str) -> np.ndarray:
    """Exact integer contraction: float64 when every partial sum is an integer below 2^53, else int64."""
    bound = float(np.abs(w).reshape(-1, w.shape[-1]).max(0).sum()) * per_unit if w.size else 0.0
    if bound < 2.0**53:
        return np.rint(subscripts_float(q.astype(np.float64), w.astype(np.float64))).astype(np.int64)
    if bound >= 2.0**62:
        raise UsageError(f"DP-VAPVI: the {what} statistic does not fit the int64 lattice at this data size "
                         f"(bound {bound:.3g} >= 2^62); use fewer rows per step or a coarser grid.")
    return subscripts_float(q, w)  # int64 arithmetic, exact below 2^63


class LatticeGaussian:
    """DP-VAPVI's ``Statistics``: inputs on power-of-two grids, exact lattice sums, exact discrete Gaussian.

    Parameters
    ----------
    scales : DPVAPVINoiseScales
    noise : dict or None
        This step's ``draw_step_noise`` (lattice units); None gives the exact
        lattice statistics (the auditor's gray-box view, never released).
    shift : float
        Multiple of the public (E/2) I of K_1, K_2 (``ridge_shift``; added by the
        backward pass to the released matrices, post-processing).

    Notes
    -----
    Sensitivities hold on the lattice, in real units unchanged: rounding phi
    toward zero keeps ||phi|| <= 1 and phi phi^T positive semi-definite;
    rounding V, V^2, r and 1/sigma^2 to the nearest grid point keeps 0 <= V <= H - h - 1,
    0 <= V^2 <= (H - h - 1)^2, 0 <= r <= 1, 0 <= 1/sigma^2 <= 1 (integer ends are grid
    points); so every bound of the
    module docstring (and the brute force of tests/test_linear_privacy.py)
    applies to the integer statistics scaled by 2^L.
    """

    def __init__(self, scales: DPVAPVINoiseScales, noise: dict | None, shift: float = 1.0):
        self.scales, self.noise, self.shift = scales, noise, shift

    def features(self, Phi):
        q = to_grid_toward_zero(Phi, FEATURE_BITS)
        if q.size and int((q * q).sum(-1).max()) > 1 << (2 * FEATURE_BITS):  # exact: ||phi|| <= 1 on the grid
            raise RuntimeError("DP-VAPVI lattice: a feature vector has norm > 1 after rounding; report this.")
        return q

    def values(self, V):
        return to_grid_nearest(np.maximum(V, 0.0), VALUE_BITS)

    def squares(self, V):
        return to_grid_nearest(np.maximum(V, 0.0) ** 2, VALUE_BITS)

    def weights(self, sigma2):
        return to_grid_nearest(1.0 / np.maximum(sigma2, 1.0), WEIGHT_BITS)

    def rewards(self, step):
        return step.r_fixed

    def outer(self, name, q, w):
        w = _exact_ints(w, name)
        if w.ndim == 2:
            f = lambda a, b: np.einsum("md,nm,me->nde", a, b, a)  # noqa: E731
        else:
            f = lambda a, b: (a * b[:, None]).T @ a  # noqa: E731
        return _lattice_sum(f, q, w, 1 << (2 * FEATURE_BITS), name)

    def inner(self, name, q, x):
        x = _exact_ints(x, name)
        return _lattice_sum(lambda a, b: b @ a, q, x, 1 << FEATURE_BITS, name)

    @property
    def ridge_shift(self) -> float:
        """The public (E/2) I of K_1, K_2 (times ``shift``), added by the backward pass (post-processing)."""
        return 0.5 * self.shift * self.scales.E if self.noise is not None else 0.0

    def release(self, name, k):
        """(k + noise) 2^-L: the integer release in real units (exact for |k + noise| < 2^53)."""
        y = k if self.noise is None else k + self.noise[name]
        return np.ldexp(y.astype(np.float64), -LATTICE_BITS[name])


# ----------------------------------------------------------------------------
# the guarantee (the one place that states what DP-VAPVI delivers)

def mechanism_text(H: int, rho: float) -> str:
    """What DP-VAPVI releases and how, for manifests and the pipeline's composed guarantee."""
    return (f"DP-VAPVI (Qiao & Wang, Alg. 2): 5H = {5 * H} discrete Gaussian releases (3 vectors, 2 symmetric matrices per step h, "
            f"fresh noise per h), rho_0 = rho/(5H) = {rho / (5 * H):.6g} each; inputs on power-of-two grids, "
            "statistics exact on their lattice, exact discrete Gaussian noise (CKS 2020); matrix noise "
            "calibrated for substitution (Frobenius sensitivity sqrt(2) k)")


def step_events(scales: DPVAPVINoiseScales, unit: PrivacyUnit) -> dict:
    """The privacy events of the 5 noisy statistics of one step h (in the statistics' natural units).

    phi_1, phi_2, phi_3: Gaussian with l2 sensitivities 2H^2 k, 2H k, 2H k and
    sigmas ``sigma_v2``, ``sigma_v``, ``sigma_r``. Each matrix K_i adds
    (Z + Z^T)/sqrt(2), whose cost for a symmetric shift of Frobenius norm
    sqrt(2) k is ||Delta||_F^2 / (4 s^2) = k^2 / (2 s^2) (module docstring),
    that of a Gaussian with l2 = k and sigma = s = ``sigma_z``; it is
    recorded so. Each costs rho_0 = rho / (5H). The lattice noise is the
    exact discrete Gaussian with exactly these variances times 4^L
    (:func:`lattice_variances`), which costs the same (CKS 2020 Thm 14): the
    event is the mechanism, its exact cost at most rho_0 with no slack.

    Returns
    -------
    dict
        ``gram``, ``v2``, ``v``, ``weighted_gram``, ``r_plus_v`` -> GaussianEvent
        (noise ``"exact"``).
    """
    sens = sensitivities(scales.H, scales.k)
    common = dict(unit=unit, noise="exact")
    k = float(scales.k)
    return {"gram": GaussianEvent(family="K1 (Gram matrix)", l2=k, sigma=scales.sigma_z, **common),
            "v2": GaussianEvent(family="phi1 (V^2)", l2=sens["v2"], sigma=scales.sigma_v2, **common),
            "v": GaussianEvent(family="phi2 (V)", l2=sens["v"], sigma=scales.sigma_v, **common),
            "weighted_gram": GaussianEvent(family="K2 (weighted Gram matrix)", l2=k, sigma=scales.sigma_z, **common),
            "r_plus_v": GaussianEvent(family="phi3 ((r+V)/sigma^2)", l2=sens["r_plus_v"], sigma=scales.sigma_r,
                                      **common)}


def privacy_event(scales: DPVAPVINoiseScales, unit: PrivacyUnit) -> ComposedEvent:
    """The privacy event of one DP-VAPVI run: the 5 statistics of :func:`step_events`, H steps, fresh noise.

    The accountant derives rho = 5H rho_0 from it (Bun & Steinke 2016, Lemma 2.3).

    Returns
    -------
    ComposedEvent
        Labelled ``"dp-vapvi"``.
    """
    step = ComposedEvent(tuple(step_events(scales, unit).values()), "one step h")
    return ComposedEvent((SelfComposedEvent(step, int(scales.H)),), label="dp-vapvi")


def guarantee(event, budget: Budget, spec, rng_mode: str) -> Guarantee:
    """The policy manifest's privacy guarantee for a DP-VAPVI run (zCDP, exact): ``budget.guarantee(event)``.

    Parameters
    ----------
    event : PrivacyEvent
        :func:`privacy_event` of the run.
    budget : Budget
        The run's budget (rho, the reporting delta, what the user asked).
    spec : DomainSpec
        Privacy unit and k.
    rng_mode : {"secure", "seeded-insecure"}
        "seeded-insecure" when a test seed drove the noise (the seed is never written).

    Returns
    -------
    Guarantee
        The envelope (``privaudit.core.envelope.envelope``): the accountant's statement
        (definition, rho, epsilon, delta, conversion, epsilon_simple,
        requested, ledger_charge_rho), no sampler (null), mechanism
        ``gaussian``, noise ``exact``, neighbouring, privacy_unit {column,
        max_episodes k}, rng, the event, and under ``details`` the mechanism
        in words (``description``, :func:`mechanism_text`),
        ``released_object`` and ``grid`` (:func:`grid`).

    Notes
    -----
    rho is exact (no extra delta): the statistics are integers on their
    lattices and the noise is an exact discrete Gaussian whose variance is
    an exact rational (``lattice_variances``); CKS 2020 Thm 14 gives each
    release rho_0 = Delta^2 / (2 sigma^2) and the 5H releases compose to rho.
    """
    details = {"description": mechanism_text(spec.horizon, budget.shown),
               "released_object": "the policy (greedy table, w_h, Lambda_h^-1); the noisy statistics are not output",
               "grid": grid()}
    return envelope(budget.guarantee(event), mechanism="gaussian", noise="exact",
                    neighbouring=Neighbouring.SUBSTITUTION.description,
                    unit={"column": spec.unit_column or "episode_id", "max_episodes": spec.max_episodes_per_unit},
                    rng=rng_mode, event=event.to_dict(), details=details)
