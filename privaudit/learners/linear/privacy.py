"""DP-VAPVI's noise: sensitivities, the 5H Gaussian releases, E, L and D.

Neighbouring relation: substitution of one privacy unit (one trajectory when
k = 1; seed 000 "replace one trajectory"). Each of the 5 statistics of step h
is released with the Gaussian mechanism at rho_0 = rho / (5H) zCDP, so the
5H releases compose to rho-zCDP (adaptive composition; seed 000 section 4,
ALGORITHMS.md 2.5). sigma_h and V_{h+1} are computed from releases of steps
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

Noise (per statistic, per step, drawn fresh; ALGORITHMS.md 2.5 "noise per h"):

* phi_1 ~ N(0, (2H^2 k)^2 / (2 rho_0) I) = N(0, 2 H^4 k^2 / rho_0 I);
* phi_2, phi_3 ~ N(0, 2 H^2 k^2 / rho_0 I);
* K_1, K_2 = (E/2) I + (Z + Z^T)/sqrt(2), Z_ij ~ N(0, k^2 / (2 rho_0)).
  For a symmetric shift Delta the zCDP cost of (Z + Z^T)/sqrt(2) with
  Z_ij ~ N(0, s^2) is ||Delta||_F^2 / (4 s^2) (diagonal entries have variance
  2 s^2, off-diagonal s^2). With ||Delta||_F^2 <= 2 k^2 and s^2 = k^2/(2 rho_0)
  this is rho_0. The paper's s^2 = 1/(4 rho_0) is calibrated for ||Delta||_F <= 1,
  i.e. add/remove of one trajectory; under substitution it would cost 2 rho_0
  per matrix and 1.4 rho in total (ALGORITHMS.md 2.5 "factor-2 gap").

E and L follow seed 000's notation list (section 8.2, with rho_0 = rho/(5H)):
E = sqrt(2d/rho_0) (2 + (log(5 c1 H / delta_f) / (c2 d))^(2/3)) and
L = 2H sqrt(d log(10 H d / delta_f) / rho_0), where delta_f is a failure
probability (not the DP delta). We multiply E by k*sqrt(2) (our matrix noise
standard deviation is k*sqrt(2) times the paper's, so 0 <= K_i <= E I keeps the
paper's margin) and L by k (the vector noise scales with k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privaudit.errors import UsageError


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
    """

    rho0: float
    sigma_v2: float
    sigma_v: float
    sigma_r: float
    sigma_z: float
    E: float
    L: float


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
    """Gaussian scales for rho-zCDP over the 5H releases (seed 000 Alg. 2 line 1, substitution).

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
    g = lambda delta: float(delta / np.sqrt(2 * rho0))  # noqa: E731 - Gaussian mechanism sigma
    E = np.sqrt(2) * k * np.sqrt(2 * d / rho0) * (2 + (np.log(5 * c1 * H / delta_fail) / (c2 * d)) ** (2 / 3))
    L = k * 2 * H * np.sqrt(d * np.log(10 * H * d / delta_fail) / rho0)
    return DPVAPVINoiseScales(rho0=rho0, sigma_v2=g(sens["v2"]), sigma_v=g(sens["v"]),
                              sigma_r=g(sens["r_plus_v"]), sigma_z=float(k / np.sqrt(2 * rho0)),
                              E=float(E), L=float(L))


def d_constant(H: int, d: int, kappa: float | None, scales: DPVAPVINoiseScales | None) -> float:
    """D of line 11 with every O~ constant 1: H^2 L/kappa + H^4 E sqrt(d)/kappa^1.5 + 2 H^3 sqrt(d).

    The last term is written 2 H^3 sqrt(d) so that D reduces to VAPVI's additive
    term (ALGORITHMS.md 2.6) without noise (``scales`` None). ``kappa`` is a
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


def symmetric_gaussian(rng: np.random.Generator, d: int, sigma_z: float, n_runs: int | None = None) -> np.ndarray:
    """(Z + Z^T)/sqrt(2) with Z_ij ~ N(0, sigma_z^2) iid, shape (d, d) (or (n_runs, d, d))."""
    Z = rng.normal(0.0, sigma_z, size=(d, d) if n_runs is None else (n_runs, d, d))
    return (Z + np.swapaxes(Z, -1, -2)) / np.sqrt(2.0)


def draw_step_noise(rng: np.random.Generator, d: int, scales: DPVAPVINoiseScales, shift: float = 1.0,
                    n_runs: int | None = None) -> dict:
    """Fresh noise for the 5 statistics of one step h (seed 000 Alg. 2 line 1, drawn per h).

    Parameters
    ----------
    rng : numpy.random.Generator
        The step's own child stream (``rng.spawn``): never shared between steps.
    d : int
        Feature dimension.
    scales : DPVAPVINoiseScales
    shift : float
        Multiple of the data-independent (E/2) I shift (1 = the paper's).
    n_runs : int, optional
        Draw n_runs independent sets at once (leading axis; the auditor's
        batched runs). None: one set, as ``fit`` uses.

    Returns
    -------
    dict
        ``phi1`` (d,), ``phi2`` (d,), ``phi3`` (d,), ``K1`` (d, d), ``K2`` (d, d),
        with K_i = (E/2) I + (Z + Z^T)/sqrt(2); each with a leading n_runs axis when given.
    """
    I_shift = 0.5 * shift * scales.E * np.eye(d)
    vec = d if n_runs is None else (n_runs, d)
    return {
        "K1": I_shift + symmetric_gaussian(rng, d, scales.sigma_z, n_runs),
        "phi1": rng.normal(0.0, scales.sigma_v2, size=vec),
        "phi2": rng.normal(0.0, scales.sigma_v, size=vec),
        "K2": I_shift + symmetric_gaussian(rng, d, scales.sigma_z, n_runs),
        "phi3": rng.normal(0.0, scales.sigma_r, size=vec),
    }
