"""Lattice statistics and exact discrete Gaussian noise for the private linear explorers.

Why (issue 10 item 3; docs/privacy.md): a float statistic plus float noise
leaks through its low-order bits, and numpy's float Gaussian is not the
continuous law the accounting assumes. So, as DP-VAPVI does
(``privaudit.learners.linear.privacy``), every input of a released statistic
is put on a power-of-two grid *before* the sums, each statistic is an exact
integer multiple of its lattice step 2^-bits, and the noise is the exact
discrete Gaussian N_Z(0, sigma^2 4^bits) on those integers
(``privaudit.privacy.fixed_point.discrete_gaussian_scaled``: a coarse part
from the exact table sampler, a uniform fine part and an exact rejection
test; total variation 0 to the target law, Canonne, Kamath & Steinke 2020
for the discrete Gaussian mechanism). The release
is an integer; its cost is Delta^2 / (2 sigma^2) per vector and
||Delta||_F^2 / (4 s^2) per symmetric matrix (CKS 2020 Thm 14, independent
coordinates; the lattice scales Delta and sigma alike), exactly what the
events state. Everything after (the public ridge and shift, the eigenvalue
floor, inverses, Q, the policy) is post-processing of integers.

Grids (the sensitivities of :mod:`privaudit.online.linear.sensitivity` hold on them):

* phi rounded **toward zero** to 2^-12 (``FEATURE_BITS``): ||phi|| <= 1 and
  phi phi^T rank-one PSD are kept (checked exactly on the integers);
* weights sigma-bar^-2 (DP-LSVI-UCB++) rounded toward zero to 2^-WB: they stay
  in [0, w_max]; the weights of LSVI-UCB, Luyo and Ngo are 1 (WB = 0, exact);
* V_{h+1}, V-check_{h+1} and rewards rounded to the nearest 2^-VB, V^2 to the
  nearest 2^-SB: their ranges [0, H], [0, 1], [0, H^2] have integer ends,
  which are grid points, so the clips behind the sensitivities hold.

The bit counts are chosen once per run from the public noise scales
(:func:`choose_lattice`): the noise standard deviation must stay below
2^46 lattice units (the exact sampler's range is 2^47), and the grids are as
fine as that allows, capped at ``WEIGHT_BITS_MAX`` / ``VALUE_BITS_MAX``. The
rounding errors (at most one grid step per input) are orders of magnitude
below the noise of every release.

Noise is drawn a block of calls at a time per family (:data:`NOISE_BLOCK`
calls first, doubling up to :data:`NOISE_BLOCK_MAX`, so a short run draws
little ahead and a long one draws in large, cheap blocks): the draws are
i.i.d. and independent of the data, so pre-drawing them is the same mechanism
as drawing each when it is released (each pre-drawn row is handed out once,
to one release), and one vectorised call per block costs far less than one
per release.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.counters import symmetric_discrete_gaussian
from privaudit.privacy.fixed_point import discrete_gaussian_scaled, to_grid_nearest, to_grid_toward_zero

#: phi is rounded toward zero to multiples of 2^-FEATURE_BITS (as DP-VAPVI).
FEATURE_BITS = 12
#: Largest grid of V, V-check and rewards (2^-8, as DP-VAPVI's VALUE_BITS).
VALUE_BITS_MAX = 8
#: Largest grid of the weights sigma-bar^-2 (<= 1/sigma_min^2 = 1/H^2 ~ 2^-8.6 at H = 20).
WEIGHT_BITS_MAX = 20
#: The noise standard deviation of every release stays at most 2^NOISE_UNITS_LOG2 lattice units
#: (``privacy.fixed_point.MAX_SIGMA_UNITS`` is 2^47).
NOISE_UNITS_LOG2 = 46
#: Calls of a family pre-drawn by its first vectorised sampler call; each later block doubles,
#: up to :data:`NOISE_BLOCK_MAX` (large blocks cost less per draw: about 0.72, 0.58 and 0.42
#: microseconds per draw at 7e4, 2.8e5 and 1.1e6 draws per sampler call, measured under load).
NOISE_BLOCK = 64
#: Largest block (DP-LSVI-UCB++: 512 x 1,100 Gram entries, about 8 MiB of int64 noise pre-drawn).
NOISE_BLOCK_MAX = 512


@dataclass(frozen=True)
class Lattice:
    """The grids of one run (public; recorded in the manifest)."""

    #: WB: weights on 2^-WB (0: unweighted statistics, weights exactly 1).
    weight_bits: int
    #: VB: V_{h+1}, V-check_{h+1} and rewards on 2^-VB.
    value_bits: int
    #: SB: V_{h+1}^2 on 2^-SB (DP-LSVI-UCB++ only).
    square_bits: int = 0
    #: FB = 12.
    feature_bits: int = FEATURE_BITS

    @property
    def gram_bits(self) -> int:
        """Step of the Gram statistics sum w phi phi^T: 2^-(2 FB + WB)."""
        return 2 * self.feature_bits + self.weight_bits

    @property
    def target_bits(self) -> int:
        """Step of the target statistics sum w phi (r +) V: 2^-(FB + WB + VB)."""
        return self.feature_bits + self.weight_bits + self.value_bits

    @property
    def square_target_bits(self) -> int:
        """Step of sum w phi V^2: 2^-(FB + WB + SB)."""
        return self.feature_bits + self.weight_bits + self.square_bits

    def describe(self) -> dict:
        """JSON-ready description (manifest ``guarantee.grid``)."""
        return {"features": f"2^-{self.feature_bits}, toward zero (||phi|| <= 1 kept)",
                "weights": ("1 (unweighted)" if self.weight_bits == 0
                            else f"2^-{self.weight_bits}, toward zero (<= w_max kept)"),
                "values_and_rewards": f"2^-{self.value_bits}, nearest",
                "squared_values": f"2^-{self.square_bits}, nearest",
                "statistics": {"gram": f"2^-{self.gram_bits}", "target": f"2^-{self.target_bits}",
                               "squared_target": f"2^-{self.square_target_bits}"},
                "noise": "exact discrete Gaussian on the integer multiples (CKS 2020; "
                         "privacy.fixed_point.discrete_gaussian_scaled); matrices: independent upper "
                         "entries N_Z(0, s^2), diagonal N_Z(0, 2 s^2)"}


def _room(sigma: float) -> int:
    """Bits of lattice below which ``sigma`` (real units) stays <= 2^NOISE_UNITS_LOG2 units."""
    return NOISE_UNITS_LOG2 - math.ceil(math.log2(sigma)) if sigma > 0 else 10 ** 6


def choose_lattice(gram_sd: float, target_sd: float, square_sd: float = 0.0, *,
                   weighted: bool = False) -> Lattice:
    """The finest grids whose noise stays within the exact sampler's range.

    Parameters
    ----------
    gram_sd : float
        Largest standard deviation of one Gram entry's noise in real units
        (sqrt(2) s on a GOE diagonal; sqrt(levels) times more is never drawn
        at once: each node is drawn separately).
    target_sd, square_sd : float
        Gaussian sigma of the target (and V^2 target) releases, real units.
    weighted : bool
        DP-LSVI-UCB++: weights on a grid (else weights are 1, WB = 0).

    Returns
    -------
    Lattice

    Raises
    ------
    UsageError
        The noise is so large that even the coarsest admissible grid (weights
        on 2^-9, values on integers) puts it beyond 2^46 lattice units (a
        budget rho below about 1e-6).
    """
    fb = FEATURE_BITS
    if weighted:
        vb, sb = 6, 0
        wb = min(WEIGHT_BITS_MAX, _room(gram_sd) - 2 * fb, _room(target_sd) - fb - vb,
                 _room(square_sd) - fb - sb)
        ok = wb >= 9
    else:
        wb, sb = 0, 0
        vb = min(VALUE_BITS_MAX, _room(target_sd) - fb)
        ok = vb >= 0 and _room(gram_sd) >= 2 * fb
    if not ok:
        raise UsageError("the privacy noise is too large for the exact lattice sampler (standard deviation "
                         "beyond 2^46 grid steps even on the coarsest grid): use a larger `rho`.")
    return Lattice(weight_bits=int(wb), value_bits=int(vb), square_bits=int(sb))


def grid_features(phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """phi (S, A, d) rounded toward zero to 2^-FB: (integer multiples, the float values).

    Raises
    ------
    RuntimeError
        A rounded vector with norm > 1 (impossible after ``checked_features``;
        a privacy invariant, so it raises rather than asserts).
    """
    q = to_grid_toward_zero(phi, FEATURE_BITS)
    if q.size and int((q * q).sum(-1).max()) > 1 << (2 * FEATURE_BITS):
        raise RuntimeError("linear explorer lattice: a feature vector has norm > 1 after rounding; report this.")
    return q, np.ldexp(q.astype(np.float64), -FEATURE_BITS)


class LatticeStats:
    """Per-step statistics of a finite-state linear MDP as exact integers on their lattices.

    The lattice twin of :class:`~privaudit.online.linear.numerics.RidgeStats`
    (without the ridge and the inverse: a private release is recomputed from
    its noisy integers each time). Integers in int64; the constructor checks
    that no sum over the declared K episodes can overflow.

    Parameters
    ----------
    horizon, n_states, dim : int
    lattice : Lattice
    n_episodes : int
        Public K (bounds the sums).
    w_max, t_max : float
        Largest weight and largest target value (H^2 when V^2 is used).

    Attributes
    ----------
    gram : ndarray, int64, shape (H, d, d)
        sum w phi phi^T in units 2^-gram_bits.
    b : ndarray, int64, shape (H, S, d)
        sum w phi 1{s' = .} in units 2^-(FB + WB).
    c : ndarray, int64, shape (H, d)
        sum w phi r in units 2^-target_bits (rewards on 2^-VB).
    """

    def __init__(self, horizon: int, n_states: int, dim: int, lattice: Lattice, n_episodes: int,
                 w_max: float = 1.0, t_max: float = 1.0):
        # |sum| <= K w_max 2^bits per Gram entry, K w_max t_max 2^bits per target coordinate (t_max = H^2 covers V^2)
        worst = n_episodes * w_max * max(2.0 ** lattice.gram_bits,
                                         max(t_max, 1.0) * 2.0 ** max(lattice.target_bits, lattice.square_target_bits))
        if worst >= 2.0 ** 61:
            raise UsageError(f"the lattice sums of K={n_episodes} episodes would overflow int64; use fewer episodes.")
        self.lattice = lattice
        self.gram = np.zeros((horizon, dim, dim), dtype=np.int64)
        self.b = np.zeros((horizon, n_states, dim), dtype=np.int64)
        self.c = np.zeros((horizon, dim), dtype=np.int64)
        self._h = np.arange(horizon)

    def __repr__(self) -> str:
        return f"LatticeStats(gram={self.gram.shape}, b={self.b.shape}, lattice={self.lattice})"

    def add(self, q: np.ndarray, next_states: np.ndarray, rewards: np.ndarray | None = None,
            weights: np.ndarray | None = None) -> np.ndarray:
        """Add one episode; returns its Gram increment (int64, (H, d, d), units 2^-gram_bits).

        Parameters
        ----------
        q : ndarray, int64, shape (H, d)
            The visited features on the 2^-FB grid (from :func:`grid_features`).
        next_states : ndarray, int, shape (H,)
        rewards : ndarray, shape (H,), optional
            r_h in [0, 1] (rounded to the nearest 2^-VB); None: not regressed.
        weights : ndarray, shape (H,), optional
            sigma-bar^-2 in [0, w_max] (rounded toward zero to 2^-WB); None: 1.
        """
        lat = self.lattice
        wq = (np.ones(len(q), dtype=np.int64) if weights is None
              else to_grid_toward_zero(weights, lat.weight_bits))
        wphi = q * wq[:, None]                                   # units 2^-(FB + WB)
        inc = wphi[:, :, None] * q[:, None, :]
        self.gram += inc
        self.b[self._h, next_states] += wphi
        if rewards is not None:
            self.c += wphi * to_grid_nearest(rewards, lat.value_bits)[:, None]
        return inc

    def target(self, h: int, v_next: np.ndarray, with_reward: bool = True) -> np.ndarray:
        """sum w phi (r +) V(s') of step h as an integer vector (d,), units 2^-target_bits.

        ``v_next`` (S,) in real units, already clipped to [0, H]; rounded to 2^-VB here.
        """
        y = to_grid_nearest(v_next, self.lattice.value_bits) @ self.b[h]
        return y + self.c[h] if with_reward else y


def grid_values(v: np.ndarray, bits: int) -> np.ndarray:
    """v rounded to the nearest 2^-bits, as floats (exact: a power-of-two scale)."""
    return np.ldexp(to_grid_nearest(v, bits).astype(np.float64), -bits)


class NoiseSource:
    """Every privacy noise of an explorer: exact discrete Gaussian, in lattice units, counted per family.

    Each call hands out new, independent rows; ``counts[family]`` is the number
    of released statistics noised so far (one per leading row: a call with
    ``n = H`` counts H statistics). Tests use the counts and the rows to check
    that noise is fresh for every (k, h) where the algorithm needs it.

    Parameters
    ----------
    rng : numpy.random.Generator
        The explorer's noise stream (OS entropy unless a test passes a seed).
    block : int, optional
        Calls pre-drawn per vectorised sampler call. None (default): adaptive,
        :data:`NOISE_BLOCK` first, each later block of a family twice the
        previous up to :data:`NOISE_BLOCK_MAX` (module docstring).
    """

    def __init__(self, rng: np.random.Generator, block: int | None = None):
        self.rng = rng
        self.block = NOISE_BLOCK if block is None else int(block)
        self.block_max = NOISE_BLOCK_MAX if block is None else self.block
        self.counts: dict[str, int] = {}
        self._buf: dict[str, tuple] = {}
        self._next_block: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"NoiseSource(counts={self.counts})"

    def _take(self, family: str, key: tuple, draw) -> np.ndarray:
        """The next pre-drawn row of ``family`` (a new block when empty or the parameters changed)."""
        key_old, rows = self._buf.get(family, (None, []))
        if key_old != key or not rows:
            m = self._next_block.get(family, self.block) if key_old in (None, key) else self.block
            self._next_block[family] = min(2 * m, self.block_max)
            rows = list(draw(m)[::-1])
            self._buf[family] = (key, rows)
        return rows.pop()

    @staticmethod
    def _variance(scale: float, bits: int) -> Fraction:
        """(scale 2^bits)^2 as an exact rational: the float scale read exactly, times a power of 4."""
        return Fraction(scale) ** 2 * Fraction(4) ** bits

    def _count(self, family: str, n: int) -> None:
        self.counts[family] = self.counts.get(family, 0) + int(n)

    def vector(self, family: str, sigma: float, bits: int, n: int, dim: int) -> np.ndarray:
        """``n`` fresh vectors N_Z(0, (sigma 2^bits)^2 I_dim), int64 (n, dim): noise of sigma on 2^-bits."""
        self._count(family, n)
        return self._take(family, ("vector", sigma, bits, n, dim),
                          lambda m: discrete_gaussian_scaled(self._variance(sigma, bits), (m, n, dim),
                                                             rng=self.rng))

    def goe(self, family: str, s: float, bits: int, n: int, dim: int) -> np.ndarray:
        """``n`` fresh symmetric integer matrices, entries N_Z(0, (s 2^bits)^2), diagonal twice that variance."""
        self._count(family, n)
        return self._take(family, ("goe", s, bits, n, dim),
                          lambda m: symmetric_discrete_gaussian(self._variance(s, bits), (m, n), dim, rng=self.rng))


def release(y_int: np.ndarray, bits: int) -> np.ndarray:
    """Integer release (statistic + noise, units 2^-bits) in real units (post-processing)."""
    return np.ldexp(y_int.astype(np.float64), -bits)
