"""Private counters under continual observation: the binary (tree) mechanism.

A :class:`TreeCounter` holds many counters at once (an array of any shape,
e.g. n_h(s, a) of shape (H, S, A)) and is fed one increment array z_t per
time t = 1..T (one episode = one time step; zeros included, so *every*
counter is released at every t). After each update it releases the noisy
prefix sums S~_t = sum_{i <= t} z_i + noise_t.

Binary mechanism (Chan, Shi & Song 2011, Alg. 2; Dwork, Naor, Pitassi &
Rothblum 2010): with L = floor(log2 T) + 1 levels, the dyadic interval
(t - 2^i, t] where i is the lowest set bit of t is a node of level i; its
noise is drawn fresh when the node closes at time t, and S~_t adds the noise
of the nodes of the set bits of t (at most L of them). Each z_t lies in at
most L nodes (one per level), so the whole output sequence is the node
vector's Laplace/Gaussian mechanism with sensitivity L * Delta_1 (Laplace) or
sqrt(L) * Delta_2 (Gaussian), where Delta is the sensitivity of one time
step's increment over *all* counters of the family (docs/online.md, "Private counters").

Implementation: the exact prefix sum is kept (inside the trusted agent) and
one noise array per open level: ``_above[j]`` = the summed noise of the open
nodes of levels >= j, so a release costs one fresh draw and O(lowest set bit)
array copies (amortised O(1)), and memory is (L + 1) * (number of counters),
independent of T beyond log T. The released value equals the tree's sum of
noisy p-sums exactly in distribution.

Calibration for a family whose one-step increments change by at most
Delta_1 (l1) or Delta_2 (l2) between neighbouring datasets:

* Laplace (pure eps_f-DP for the family's whole stream): node scale
  b = L * Delta_1 / eps_f;
* Gaussian (rho_f-zCDP): node sigma^2 = L * Delta_2^2 / (2 rho_f);
* GOE (rho_f-zCDP for symmetric matrix counters, e.g. Gram matrices): node
  noise (Z + Z^T)/sqrt(2) with Z_ij ~ N(0, s^2); it costs ||Delta||_F^2 / (4 s^2)
  per node (docs/online.md, "Exact GOE nodes"), so s^2 = L * Delta_F^2 / (4 rho_f).

Noise kinds. ``noise="exact"`` (PUCB, and the linear explorers' Gram trees):
the counters hold integers (counts, or reals put on a power-of-two lattice
and counted in lattice units) and every node draws the exact discrete
Laplace (P(y) proportional to exp(-|y|/b)) or discrete Gaussian
N_Z(0, sigma^2) of ``privaudit.privacy.samplers`` (sigma up to 2^15; beyond,
and for ``goe``, ``privaudit.privacy.fixed_point.discrete_gaussian_scaled``,
up to 2^47, drawn :data:`WIDE_BLOCK` nodes at a time), total variation 0 to
the target law. An exact ``goe`` node is a symmetric integer matrix with
independent upper entries N_Z(0, s^2) and diagonal N_Z(0, 2 s^2)
(:func:`symmetric_discrete_gaussian`). The node vector is then the discrete
Laplace mechanism (eps = L Delta_1 / b for integer-valued sensitivity, Ghosh,
Roughgarden & Sundararajan 2012; CKS 2020 section 2.2) or the multivariate
discrete Gaussian mechanism (rho = L Delta_2^2 / (2 sigma^2), resp.
L Delta_F^2 / (4 s^2) for goe; Canonne, Kamath & Steinke 2020, Thm 14), the
same costs as the continuous mechanisms, with Delta and the scale in lattice
units; the releases are integers (no float side channel).
``noise="continuous"``: numpy's float samplers, whose truncated tails and
float grids are not the continuous laws the accounting assumes; the stated
guarantee is that of the ideal continuous mechanism and is *not certified*
for the sampler (``privaudit.privacy.samplers.noise_statement("continuous")``).

Under JDP with *replacement* of one user (one episode), a per-step count
family (one unit per step h) has Delta_1 = 2H and Delta_2 = sqrt(2H)
(Vietri et al. 2020, Claim 1, state H: the add/remove relation).

References
----------
T.-H. H. Chan, E. Shi, D. Song, "Private and continual release of
statistics", ACM TISSEC 14(3), 2011 (Alg. 2; Lemma 2.8 / Cor. 2.9 for the
Laplace sum bound). C. Dwork, M. Naor, T. Pitassi, G. Rothblum,
"Differential privacy under continual observation", STOC 2010.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy import special

from privaudit.core.errors import UsageError
from privaudit.privacy.fixed_point import MAX_SIGMA_UNITS, discrete_gaussian_scaled
from privaudit.privacy.samplers import GAUSSIAN_SIGMA_MAX, exact_noise, get_sampler
from privaudit.privacy.events import GaussianEvent, PrivacyEvent, PrivacyUnit
from privaudit.privacy.noise import FAMILIES

#: Node noises drawn per vectorised call on the wide exact path (goe, or Gaussian sigma above 2^15 units).
WIDE_BLOCK = 256
#: Noise families a TreeCounter can draw ("none": exact counts, no privacy).
COUNTER_NOISE = ("laplace", "gaussian", "goe", "none")
#: How the node noise is drawn: exact discrete samplers on integer counters (total variation 0),
#: or numpy's float samplers (``Generator.laplace`` / ``normal``; not certified, module docstring).
NOISE_KINDS = ("exact", "continuous")


def symmetric_discrete_gaussian(s2: Fraction, lead: tuple, dim: int, *, rng: np.random.Generator) -> np.ndarray:
    """Exact integer "GOE" matrices: upper entries N_Z(0, s2), diagonal N_Z(0, 2 s2), mirrored.

    Parameters
    ----------
    s2 : Fraction
        Off-diagonal variance parameter in lattice units (exact rational; sqrt(2 s2) <= 2^47).
    lead : tuple of int
        Leading shape.
    dim : int
        Matrix size d.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of int64, shape lead + (dim, dim), symmetric

    Notes
    -----
    The lattice analogue of (Z + Z^T)/sqrt(2), Z_ij ~ N(0, s^2): independent
    coordinates with the same variances (off-diagonal s^2, diagonal 2 s^2), so
    a symmetric shift Delta costs ||Delta||_F^2 / (4 s^2) zCDP (CKS 2020
    Thm 14). Exact sampler: ``privaudit.privacy.fixed_point.discrete_gaussian_scaled``
    (off-diagonal entries first, then the diagonal).
    """
    n_off = dim * (dim - 1) // 2
    vals = np.empty(tuple(lead) + (n_off + dim,), dtype=np.int64)   # upper entries (row-major), then diagonal
    vals[..., :n_off] = discrete_gaussian_scaled(s2, tuple(lead) + (n_off,), rng=rng)
    vals[..., n_off:] = discrete_gaussian_scaled(2 * s2, tuple(lead) + (dim,), rng=rng)
    return np.take(vals, _symmetric_index(dim), axis=-1)


def _symmetric_index(dim: int) -> np.ndarray:
    """(dim, dim) positions in [upper entries (row-major), diagonal] of each entry of a symmetric matrix."""
    iu = np.triu_indices(dim, 1)
    idx = np.empty((dim, dim), dtype=np.intp)
    idx[iu] = idx[iu[::-1]] = np.arange(len(iu[0]))
    idx[np.arange(dim), np.arange(dim)] = len(iu[0]) + np.arange(dim)
    return idx


def tree_levels(n_releases: int) -> int:
    """L = floor(log2 T) + 1, the number of levels of a binary tree over T >= 1 leaves.

    (Not ceil(log2 T): with T a power of two the root level is needed; a
    ceil would leave the release at t = T without its node.)
    """
    T = int(n_releases)
    if T < 1:
        raise UsageError(f"`n_releases` must be >= 1. Got {n_releases}.")
    return T.bit_length()


def laplace_node_scale(l1_step: float, n_levels: int, epsilon: float) -> float:
    """Node scale b = L * Delta_1 / eps for an eps-DP stream of one family.

    Parameters
    ----------
    l1_step : float
        Delta_1: l1 change of one time step's increments over all counters of
        the family between neighbouring datasets.
    n_levels : int
        L.
    epsilon : float
        The family's budget eps_f > 0.
    """
    _check_pos("epsilon", epsilon)
    _check_pos("l1_step", l1_step)
    return float(np.nextafter(n_levels * l1_step / epsilon, math.inf))


def gaussian_node_sigma(l2_step: float, n_levels: int, rho: float) -> float:
    """Node sigma = sqrt(L * Delta_2^2 / (2 rho)) for a rho-zCDP stream of one family."""
    _check_pos("rho", rho)
    _check_pos("l2_step", l2_step)
    return float(np.nextafter(math.sqrt(n_levels * l2_step ** 2 / (2.0 * rho)), math.inf))


def goe_node_scale(frobenius_step: float, n_levels: int, rho: float) -> float:
    """GOE entry scale s = sqrt(L * Delta_F^2 / (4 rho)) for a rho-zCDP stream of symmetric matrices."""
    _check_pos("rho", rho)
    _check_pos("frobenius_step", frobenius_step)
    return float(np.nextafter(math.sqrt(n_levels * frobenius_step ** 2 / (4.0 * rho)), math.inf))


def _check_pos(name: str, v) -> None:
    try:
        ok = float(v) > 0 and math.isfinite(float(v))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise UsageError(f"`{name}` must be a positive finite number. Got {v!r}.")


class TreeCounter:
    """Binary-mechanism counters over a stream of increment arrays.

    Parameters
    ----------
    shape : tuple of int
        Shape of the counter array (one counter per entry; for ``goe`` the
        last two axes are a square symmetric matrix).
    n_releases : int
        T, the public maximal number of updates (fixes L = floor(log2 T) + 1).
    mechanism : {"laplace", "gaussian", "goe", "none"}
        Node noise: Lap(scale), N(0, scale^2), GOE with entry scale ``scale``,
        or none (exact counts: the non-private twin).
    scale : float
        b, sigma or s (ignored for ``none``). Use :func:`laplace_node_scale`,
        :func:`gaussian_node_sigma` or :func:`goe_node_scale`.
    rng : numpy.random.Generator
        Source of the noise (build it from OS entropy except in tests).
    noise : {"continuous", "exact"}
        ``"exact"``: integer counters (increments must be integers, in the
        counter's lattice units), exact discrete Laplace / Gaussian / goe node
        noise with ``scale`` in the same units, int64 releases. ``"continuous"``: numpy's float samplers (module
        docstring: not certified).

    Attributes
    ----------
    t : int
        Number of updates so far.
    n_levels : int
        L.
    draws : int
        Number of node-noise arrays drawn so far (one per update).

    Notes
    -----
    The counter array's values and its exact sums are private: ``__repr__``
    shows shapes only.
    """

    def __init__(self, shape, n_releases: int, mechanism: str, scale: float = 0.0, *,
                 rng: np.random.Generator, noise: str = "continuous"):
        if mechanism not in COUNTER_NOISE:
            raise UsageError(f"`mechanism` must be one of {COUNTER_NOISE}. Got {mechanism!r}.")
        if noise not in NOISE_KINDS:
            raise UsageError(f"`noise` must be one of {NOISE_KINDS}. Got {noise!r}.")
        self.shape = tuple(int(x) for x in np.atleast_1d(shape))
        if mechanism == "goe" and (len(self.shape) < 2 or self.shape[-1] != self.shape[-2]):
            raise UsageError(f"a goe counter needs square last axes. Got shape {self.shape}.")
        if mechanism != "none":
            _check_pos("scale", scale)
        wide = noise == "exact" and (mechanism == "goe" or (mechanism == "gaussian"
                                                           and float(scale) > GAUSSIAN_SIGMA_MAX))
        if wide and (math.sqrt(2.0) if mechanism == "goe" else 1.0) * float(scale) > MAX_SIGMA_UNITS:
            raise UsageError(f"the exact {mechanism} sampler draws sigma up to 2^47 lattice units; node scale "
                             f"{scale!r} (times sqrt(2) on a goe diagonal) is above. Use a coarser lattice.")
        if noise == "exact" and mechanism != "none" and not wide:
            try:  # builds (and caches) the exact sampler's table now, not at the first release
                get_sampler(mechanism, scale)
            except RuntimeError:
                raise UsageError(f"the exact {mechanism} sampler cannot draw at node scale {scale!r} (lattice units): "
                                 "the scale is so small that its CDF is within 2^-16000 of a 2^-64 cell edge. "
                                 "Use a smaller privacy budget, or epsilon = inf for no noise.") from None
        if not (hasattr(rng, "laplace") and hasattr(rng, "normal")):
            raise UsageError(f"`rng` must be a numpy Generator. Got {type(rng).__name__}.")
        self.mechanism = mechanism
        self.noise = noise
        self.scale = float(scale)
        self.n_releases = int(n_releases)
        self.n_levels = tree_levels(n_releases)
        self.rng = rng
        self.t = 0
        self.draws = 0
        self._wide = wide
        self._block: list[np.ndarray] = []   # pre-drawn node noises of the wide exact path (module docstring)
        dtype = np.int64 if noise == "exact" else np.float64
        self._exact = np.zeros(self.shape, dtype=dtype)
        # _above[j]: summed noise of the open nodes at levels >= j; _above[L] = 0
        self._above = None if mechanism == "none" else np.zeros((self.n_levels + 1,) + self.shape, dtype=dtype)

    @property
    def sampler_path(self) -> str | None:
        """The exact sampler this counter's node noises come from (``samplers.noise_statement`` paths).

        ``"scaled"`` (``fixed_point.discrete_gaussian_scaled``) for the wide
        exact path (goe, or Gaussian above ``GAUSSIAN_SIGMA_MAX`` units),
        ``"table"`` (``samplers.exact_noise``) for the other exact counters,
        None without exact noise.
        """
        if self.noise != "exact" or self.mechanism == "none":
            return None
        return "scaled" if self._wide else "table"

    def __repr__(self) -> str:
        return (f"TreeCounter(shape={self.shape}, mechanism={self.mechanism!r}, T={self.n_releases}, "
                f"L={self.n_levels}, t={self.t})")

    def _draw(self) -> np.ndarray:
        self.draws += 1
        if self.noise == "exact":
            if self._wide:
                if not self._block:
                    self._block = self._wide_block()
                return self._block.pop()
            n = int(np.prod(self.shape))
            return exact_noise(self.mechanism, self.scale, n, rng=self.rng).reshape(self.shape)
        if self.mechanism == "laplace":
            return self.rng.laplace(0.0, self.scale, size=self.shape)
        z = self.rng.normal(0.0, self.scale, size=self.shape)
        if self.mechanism == "goe":
            z = (z + np.swapaxes(z, -1, -2)) / math.sqrt(2.0)
        return z

    def _wide_block(self) -> list[np.ndarray]:
        """The next node noises of the wide exact path (sigma above 2^15 units, or goe), drawn together.

        The node noises are i.i.d. and independent of the data, so drawing
        up to :data:`WIDE_BLOCK` of them in one vectorised call of
        ``discrete_gaussian_scaled`` (one call per node costs milliseconds)
        is the same mechanism as drawing each when its node closes. Never
        more than the remaining releases. ``goe``: the upper off-diagonal
        entries are N_Z(0, s^2) and the diagonal N_Z(0, 2 s^2), independent,
        mirrored to a symmetric integer matrix: the law of (Z + Z^T)/sqrt(2)
        on the lattice, whose cost for a symmetric shift Delta is
        sum_(i<j) Delta_ij^2 / (2 s^2) + sum_i Delta_ii^2 / (4 s^2)
        = ||Delta||_F^2 / (4 s^2) (CKS 2020 Thm 14 with per-coordinate
        variances), as for the continuous GOE.
        """
        n = max(1, min(WIDE_BLOCK, self.n_releases - self.t + 1))
        return list(self.node_noises(n, self.rng)[::-1])

    def node_noises(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` i.i.d. node noises of the wide exact path, shape (n, *shape), int64, from ``rng``.

        The law of every node of this counter (``_wide_block``'s docstring).
        Public so that an auditor running many copies of one counter can draw
        all their nodes in one call and hand them over with :meth:`supply`.
        """
        if not self._wide:
            raise UsageError("node_noises serves the wide exact path (goe, or exact Gaussian above 2^15 units).")
        s2 = Fraction(self.scale) ** 2            # exact: the float scale read as a rational
        if self.mechanism == "gaussian":
            return discrete_gaussian_scaled(s2, (int(n),) + self.shape, rng=rng)
        return symmetric_discrete_gaussian(s2, (int(n),) + self.shape[:-2], self.shape[-1], rng=rng)

    def supply(self, noises: np.ndarray) -> None:
        """Queue node noises drawn by :meth:`node_noises` (of this counter's law), used before any new draw.

        Node noises are i.i.d. and independent of the data, so noise drawn
        earlier (for a batch of audit runs at once) is the same mechanism.
        """
        noises = np.asarray(noises)
        if not self._wide or noises.shape[1:] != self.shape or noises.dtype != np.int64:
            raise UsageError(f"supply takes int64 node noises of shape (n, {self.shape}) on the wide exact path.")
        self._block = self._block + list(noises[::-1])   # popped from the end: these come first

    def open_levels(self) -> list[int]:
        """Levels whose node noise is in the current release: the set bits of t."""
        return [j for j in range(self.n_levels) if (self.t >> j) & 1]

    def update(self, z: np.ndarray) -> np.ndarray:
        """Feed increment ``z`` (shape ``shape``) for the next time step; return the release.

        Returns
        -------
        ndarray, shape ``shape``
            S~_t = sum_{i <= t} z_i + the noise of the open nodes (a new array;
            int64 for ``noise="exact"``).

        Raises
        ------
        UsageError
            More than T updates, or ``z`` of another shape, or not integer
            (``noise="exact"``).
        """
        if self.t >= self.n_releases:
            raise UsageError(f"this counter was built for T={self.n_releases} releases; the tree (and the "
                             "privacy accounting) does not cover more.")
        z = np.asarray(z)
        if z.shape != self.shape:
            raise UsageError(f"increment has shape {z.shape}; the counter has shape {self.shape}.")
        if self.noise == "exact":
            if z.dtype.kind not in "iu":
                if not (np.isfinite(z).all() and np.array_equal(z, np.round(z))):
                    raise UsageError("an exact counter takes integer increments (lattice units); got non-integers.")
            z = z.astype(np.int64)
        else:
            z = z.astype(np.float64)
        self.t += 1
        self._exact += z
        if self._above is None:
            return self._exact.copy()
        i = (self.t & -self.t).bit_length() - 1  # lowest set bit: the node (t - 2^i, t] closes now
        self._above[i] = self._above[i + 1] + self._draw()
        self._above[:i] = self._above[i]  # levels < i are closed; the sums from them on equal level i's
        return self._exact + self._above[0]

    def current_noise_terms(self) -> int:
        """Number of node-noise values in the last release (popcount of t, <= L)."""
        return bin(self.t).count("1")


def tree_error_bound(mechanism: str, scale: float, n_levels: int, beta: float, *,
                     n_counters: int = 1, n_releases: int = 1) -> float:
    """High-probability bound E on |S~_t - S_t| for a tree counter.

    With probability >= 1 - beta, |S~_t - S_t| <= E simultaneously for all
    ``n_counters`` scalar counters and all ``n_releases`` releases (union
    bound: beta' = beta / (n_counters * n_releases) each).

    Parameters
    ----------
    mechanism : {"laplace", "gaussian", "none"}
    scale : float
        Node scale b (Laplace) or sigma (Gaussian).
    n_levels : int
        L: a release sums at most L node noises.
    beta : float
        Failure probability in (0, 1).
    n_counters, n_releases : int
        Sizes of the union bound.

    Returns
    -------
    float
        Laplace: E = b * max(sqrt(L), sqrt(ln(2/beta'))) * sqrt(8 ln(2/beta'))
        (Chan, Shi & Song 2011, Cor. 2.9: a sum of m <= L iid Lap(b) with
        nu >= b*sqrt(m)); Gaussian: E = sigma * sqrt(L) * z_{beta'/2} (a sum of
        m <= L iid normals is N(0, m sigma^2)); ``none``: 0.

    Raises
    ------
    UsageError
        ``beta`` outside (0, 1), a non-positive size or scale.
    """
    if mechanism == "none":
        return 0.0
    if not 0 < beta < 1:
        raise UsageError(f"`beta` must be in (0, 1). Got {beta!r}.")
    _check_pos("scale", scale)
    if int(n_levels) < 1 or int(n_counters) < 1 or int(n_releases) < 1:
        raise UsageError("`n_levels`, `n_counters` and `n_releases` must be >= 1.")
    log_term = math.log(2.0) - (math.log(beta) - math.log(n_counters) - math.log(n_releases))  # ln(2/beta')
    if mechanism == "laplace":
        return float(scale * max(math.sqrt(n_levels), math.sqrt(log_term)) * math.sqrt(8.0 * log_term))
    if mechanism == "gaussian":
        beta_p = beta / (float(n_counters) * float(n_releases))
        z = math.sqrt(2.0) * special.erfcinv(beta_p)  # P(|N(0,1)| > z) = beta'
        return float(scale * math.sqrt(n_levels) * z)
    raise UsageError(f"`mechanism` must be 'laplace', 'gaussian' or 'none' for an error bound. Got {mechanism!r}.")


def tree_counter_event(family: str, mechanism: str, step_sensitivity: float, n_levels: int,
                       scale: float, *, privacy_unit: PrivacyUnit = PrivacyUnit("user", 1),
                       noise: str = "continuous") -> PrivacyEvent:
    """The privacy event of one family's tree-counter stream (all its releases).

    The whole output sequence is a function of the node noises' vector, whose
    sensitivity is L * Delta_1 (Laplace) or sqrt(L) * Delta_2 (Gaussian) or
    sqrt(L) * Delta_F (GOE, recorded as a Gaussian event with the equivalent
    rho = L Delta_F^2 / (4 s^2), i.e. l2 = sqrt(L/2) Delta_F against sigma = s).

    This is the one place where an online counter becomes a privacy event
    (``privaudit.privacy.events``; its cost is derived by
    ``privaudit.privacy.accounting``).

    Parameters
    ----------
    family : str
        E.g. ``"pucb:visits"``.
    mechanism : {"laplace", "gaussian", "goe"}
    step_sensitivity : float
        Delta_1 (Laplace), Delta_2 (Gaussian) or Delta_F (GOE) of one step.
    n_levels : int
        L.
    scale : float
        Node scale b, sigma or s.
    privacy_unit : PrivacyUnit
        One user (one episode): column ``"user"``, k = 1.
    noise : {"continuous", "exact"}
        How the node noise is drawn (:class:`TreeCounter`); recorded in the
        event. For ``"exact"`` the sensitivity and the scale may be given in
        real units: the lattice rescales both alike, so the cost is the same.

    Returns
    -------
    PrivacyEvent
        Neighbouring relation ``substitution`` (one user's data replaced).
    """
    L = int(n_levels)
    if noise not in NOISE_KINDS:
        raise UsageError(f"`noise` must be one of {NOISE_KINDS}. Got {noise!r}.")
    common = dict(family=family, unit=privacy_unit, noise=noise)
    if mechanism in FAMILIES:
        fam = FAMILIES[mechanism]
        return fam.event(fam.stacked_sensitivity(step_sensitivity, L), scale, **common)
    if mechanism == "goe":
        return GaussianEvent(l2=math.sqrt(L / 2.0) * float(step_sensitivity), sigma=scale, **common)
    raise UsageError(f"no privacy event for mechanism {mechanism!r}.")
