"""The exact table sampler: one uniform 64-bit word per draw of the discrete Gaussian or discrete Laplace.

How (one uniform 64-bit word per draw, Walker's alias method)
------------------------------------------------------------
Think of the inverse-CDF sampler y = F^-1(V), V uniform on [0, 1), with the
boundaries F(b) = P(Y <= b) for b = -T-1, ..., T (T: the table half-width,
about 6.6 sigma or 21.5 b, so that P(|Y| > T) is about 2^-30). Cut [0, 1) into
2^64 cells of width 2^-64. A cell that contains no boundary lies inside one
outcome's interval: the lower tail (y < -T), one y in [-T, T], or the upper
tail (y > T). Each outcome owns c_o such "full" cells; the remaining cells
(at most 2T+2, one per boundary) are "ambiguous". The integers c_o and the
number of ambiguous cells sum to 2^64 exactly; an alias table over these
integer weights (Walker 1977, Vose 1991, in exact integer arithmetic) turns one
uniform 64-bit word into an outcome with probability exactly weight / 2^64:

* a central y: output y (P = c_y 2^-64);
* "ambiguous" (probability (2T+2) 2^-64, about 1e-17 per draw): pick an
  ambiguous cell uniformly and find F^-1(V) for V uniform in that cell,
  drawing further 64-bit words of V until the comparison with the boundaries
  in the cell is decided by rigorous bounds on F
  (``privaudit.privacy.sampler_laws``);
* a tail: draw from the law conditioned on y > T (mirrored for y < -T), exactly:
  Laplace: T + 1 + G with G = Y | Y >= 0 drawn from this same sampler
  (memorylessness); Gaussian: T + 1 + G, G geometric with ratio
  exp(-(T+1)/sigma^2) (this sampler's discrete Laplace) accepted with
  probability exp(-G^2 / (2 sigma^2)) (Canonne, Kamath & Steinke 2020,
  Algorithm 1, on Python rationals).

Adding the pieces, P(output = y) = c_y 2^-64 + (the parts of y's interval
inside ambiguous cells) = F(y) - F(y-1): the sampler is exact, given uniform
64-bit words (numpy's ``Generator``; OS entropy for a real release).


Speed: about 1 word, 2 table look-ups and a few array operations per draw
(benchmarks/bench_noise.py). :meth:`ExactSampler.add_into` adds the noise in
place into an int64 array (the release path), chunk by chunk through
cache-resident scratch buffers, with a guide table (one look-up per draw) for
the count scales: 104-128 M draws per CPU second against 54-56 before. Building a table costs O(T + tail) Python integer
operations (milliseconds for sigma ~ 6, about 0.5 s for sigma ~ 6000); tables
are cached per (mechanism, scale). The table half-width is capped at
2^17 - 2; beyond that (sigma above about 2e4, b above about 6e3) a growing
share of draws goes through the (exact, slower) tail paths: 19% of draws at
b = 8e4, where the whole sampler runs at about 22 M/s per thread against
about 50 M/s at b = 100 (docs/privacy.md); sigma is limited to
:data:`GAUSSIAN_SIGMA_MAX` = 2^15.

"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np

from privaudit.privacy.sampler_laws import alias_table, bernoulli_exp, cdf_intervals, half_width, law_class

#: elements per chunk of ExactSampler.add_into (scratch buffers of this many elements stay in cache)
_INPLACE_CHUNK = 1 << 15
#: largest table half-width served by the guide table of add_into (int16 entries; sigma up to about 300,
#: b up to about 90: every count scale of a release); larger tables use the chunked alias method
_GUIDE_MAX_T = 2000
#: guide table size: about _GUIDE_PURITY buckets per outcome, so at most ~1/_GUIDE_PURITY of the words are impure
_GUIDE_PURITY = 256
#: at least 2^_GUIDE_MIN_BITS and at most 2^_GUIDE_MAX_BITS guide entries (int16: 256 KB)
_GUIDE_MIN_BITS = 8
_GUIDE_MAX_BITS = 17
#: bit generators whose ``random_raw`` words are 64 uniform bits
_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


@lru_cache(maxsize=64)
def cached_sampler(mechanism: str, x: Fraction) -> "ExactSampler":
    """The :class:`ExactSampler` of law parameter x (``sampler_laws.law_parameter``), built once per (mechanism, x)."""
    return ExactSampler(mechanism, x)


def uniform_words(rng: np.random.Generator, n: int) -> np.ndarray:
    """n uniform 64-bit words from the generator."""
    bg = rng.bit_generator
    if isinstance(bg, _RAW64):
        return bg.random_raw(n)
    return rng.integers(0, 1 << 64, n, dtype=np.uint64)


class ExactSampler:
    """Exact sampler of one discrete Gaussian / discrete Laplace law (see the module docstring).

    Parameters
    ----------
    mechanism : {"gaussian", "laplace"}
    x : Fraction
        1 / (2 sigma^2) (Gaussian) or 1 / b (Laplace), > 0.

    Attributes
    ----------
    T : int
        Table half-width: values in [-T, T] come from the alias table.
    weights_ : np.ndarray of uint64, shape (2T + 4,)
        Full-cell counts (probability numerators over 2^64) of the outcomes:
        lower tail, y = -T..T, upper tail, ambiguous.
    """

    def __init__(self, mechanism: str, x: Fraction):
        self.law = law_class(mechanism)(x)
        self.mechanism, self.x = mechanism, x
        self.T = T = half_width(mechanism, x)
        self._cdf_cache: dict[int, list] = {}
        P = 64 + 2 * max(T, 1).bit_length() + 40
        while True:
            F = self._cdf_at(P)
            K = [lo >> (P - 64) for lo, _ in F]
            if all(hi >> (P - 64) == c for (_, hi), c in zip(F, K)):
                break
            P *= 2  # a boundary within 2^-P of a cell edge: decide it at higher precision
            if P > 1 << 14:
                raise RuntimeError("exact sampler: cannot separate a CDF value from a cell edge; report this")
        self._cdf_cache.clear()  # tens of MB at T ~ 1e5; the rare refinement recomputes at P >= 192 anyway
        Ka = np.array(K, dtype=np.uint64)
        del K
        self._K = Ka                              # cell index of each boundary, nondecreasing (uint64)
        gaps = np.diff(Ka)                        # K is nondecreasing: no wrap-around
        self._amb = np.concatenate([Ka[:1], Ka[1:][gaps > 0]])  # ambiguous cells (distinct K), sorted
        # outcomes: 0 (lower tail), 1..m-1 (y = -T..T), m (upper tail), m + 1 (ambiguous); all < 2^64
        self.weights_ = np.concatenate([Ka[:1], np.where(gaps > 0, gaps - np.uint64(1), np.uint64(0)),
                                        [np.uint64((1 << 64) - 1 - int(Ka[-1])), np.uint64(len(self._amb))]])
        k = max(2, (len(self.weights_) - 1).bit_length())
        self._shift = np.uint64(64 - k)
        self._mask = np.uint64((1 << (64 - k)) - 1)
        self._thresh, self._alias = alias_table(self.weights_.tolist(), k)
        self._guide = None     # guide table of add_into (small tables only), built on first use
        self._proposal = None  # Gaussian tail proposal (a discrete Laplace sampler), built on first use
        self._coarse = None    # Laplace: sampler of exp(-x L), L = T (T >= 2) or 2, for the tails

    def _cdf_at(self, P: int) -> list[tuple[int, int]]:
        if P not in self._cdf_cache:
            self._cdf_cache[P] = cdf_intervals(self.law, self.T, P)
        return self._cdf_cache[P]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n exact draws, int64 array of shape (n,)."""
        return self._draw(n, rng, tails=True)

    # -- in place -------------------------------------------------------------

    def add_into(self, out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Add one exact draw to every element of ``out``, in place; returns ``out``.

        Parameters
        ----------
        out : np.ndarray of int64, C-contiguous, any shape
            Overwritten with out + noise (one independent draw per element).
        rng : np.random.Generator

        Notes
        -----
        Works in chunks of :data:`_INPLACE_CHUNK` elements through scratch
        buffers allocated once per call (a few hundred KB, cache-resident):
        no array of the size of ``out`` is allocated. Each draw takes one
        uniform 64-bit word u. For tables with few boundaries (half-width
        T <= :data:`_GUIDE_MAX_T`: every count scale of a release) a guide
        table indexed by the top m bits of u gives the outcome directly
        whenever its 2^(64-m) words lie inside one outcome's interval of the
        cumulative weights (all but at most 2T+3 of the 2^m buckets); the
        others are decided by a binary search of u in the cumulative weights.
        So outcome o is drawn with probability weights_[o] / 2^64, the law of
        :meth:`sample` (same outcomes, same finishing of tails and ambiguous
        cells): total variation 0 to the target law. Larger tables use the
        alias method of :meth:`sample`, chunked the same way.
        """
        if out.dtype != np.int64 or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("add_into needs a writeable C-contiguous int64 array")
        flat = out.reshape(-1)
        n = flat.size
        c = min(n, _INPLACE_CHUNK)
        guide = self._guide_table()
        if guide is not None:
            table, shift, cum = guide
            idx = np.empty(c, dtype=np.intp)
            noise = np.empty(c, dtype=table.dtype)
            for start in range(0, n, c):
                m = min(c, n - start)
                u = uniform_words(rng, m)
                ix, nz = idx[:m], noise[:m]
                np.right_shift(u, shift, out=ix.view(np.uint64))
                np.take(table, ix, out=nz, mode="clip")
                special = None
                if nz.max() > self.T or nz.min() < -self.T:  # impure bucket, tail or ambiguous: rare
                    special = self._settle(nz, u, cum, rng)
                np.add(flat[start:start + m], nz, out=flat[start:start + m], casting="unsafe")
                if special is not None:  # int64 values (a tail draw need not fit the int16 table type)
                    flat[start + special[0]] += special[1]
            return out
        low = np.empty(c, dtype=np.uint64)
        tb = np.empty(c, dtype=np.uint64)
        keep = np.empty(c, dtype=bool)
        for start in range(0, n, c):
            m = min(c, n - start)
            u = uniform_words(rng, m)
            lo, t, k = low[:m], tb[:m], keep[:m]
            np.bitwise_and(u, self._mask, out=lo)
            col = np.right_shift(u, self._shift, out=u).view(np.intp)
            np.take(self._thresh, col, out=t, mode="clip")
            np.less(lo, t, out=k)
            o = lo.view(np.intp)                       # low is no longer needed: reuse it for the outcome
            np.take(self._alias, col, out=o, mode="clip")
            np.copyto(o, col, where=k)
            o -= self.T + 1
            if o.max() > self.T or o.min() < -self.T:
                sp = np.flatnonzero(np.abs(o) > self.T)
                o[sp] = self._finish(o[sp], rng, True)
            flat[start:start + m] += o
        return out

    def _guide_table(self):
        """(table, shift, cum) of the guide-table path, built on first use; None when T > _GUIDE_MAX_T.

        ``cum`` (uint64, the cumulative weights without the final 2^64) puts
        outcome o on the words [cum[o-1], cum[o]); bucket b (the top m bits)
        holds y = o - T - 1 when all its words map to the same outcome o, else
        the mark T + 3 (decide by searching u in ``cum``).
        """
        if self.T > _GUIDE_MAX_T:
            return None
        if self._guide is None:
            w = [int(x) for x in self.weights_]
            m = min(_GUIDE_MAX_BITS, max(_GUIDE_MIN_BITS, (len(w) * _GUIDE_PURITY).bit_length()))
            cum = np.cumsum(np.array(w[:-1], dtype=object)).astype(np.uint64)  # < 2^64: the last weight > 0
            edges = np.arange(1 << m, dtype=np.uint64) << np.uint64(64 - m)   # first word of each bucket
            first = np.searchsorted(cum, edges, side="right")
            last = np.searchsorted(cum, edges | np.uint64((1 << (64 - m)) - 1), side="right")
            table = np.where(first == last, first - (self.T + 1), self.T + 3).astype(np.int16)
            self._guide = (table, np.uint64(64 - m), cum)
        return self._guide

    def _settle(self, nz: np.ndarray, u: np.ndarray, cum: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Guide path, the draws outside [-T, T] of the table: impure buckets, tails, ambiguous cells.

        Impure buckets are decided by searching u in ``cum``; the tails and
        ambiguous outcomes this gives (or the table gave) are finished by
        :meth:`_finish`. Returns (positions, int64 draws) and sets those
        positions of ``nz`` to 0, so the caller adds the draws in int64.
        """
        T = self.T
        sp = np.flatnonzero((nz > T) | (nz < -T))
        y = nz[sp].astype(np.int64)
        imp = y == T + 3
        if imp.any():
            y[imp] = np.searchsorted(cum, u[sp[imp]], side="right") - (T + 1)
        fin = (y > T) | (y < -T)
        if fin.any():
            y[fin] = self._finish(y[fin], rng, True)
        nz[sp] = 0
        return sp, y

    def _draw(self, n: int, rng: np.random.Generator, tails: bool) -> np.ndarray:
        """n exact draws; with ``tails=False`` a draw beyond [-T, T] is returned as -T-1 or T+1 (the event)."""
        u = uniform_words(rng, n)
        low = u & self._mask                  # position inside the column
        col = np.right_shift(u, self._shift, out=u).view(np.intp)  # column (< 2^k), in place
        out = np.where(low < self._thresh[col], col, self._alias[col])
        del low, u
        m = len(self._K)
        special = (np.flatnonzero((out == 0) | (out >= m))
                   if n and (out.min() == 0 or out.max() >= m) else None)  # rare: about 2^-30 per draw
        out -= self.T + 1  # outcome o -> y = o - T - 1; -T-1: lower tail, T+1: upper, T+2: ambiguous
        if special is not None:
            out[special] = self._finish(out[special], rng, tails)
        return out.astype(np.int64, copy=False)

    # -- rare paths ----------------------------------------------------------

    def _finish(self, marks: np.ndarray, rng: np.random.Generator, tails: bool) -> np.ndarray:
        """Turn ambiguous markers (and, if ``tails``, tail markers) into exact draws."""
        T, marks = self.T, marks.copy()
        for i in np.flatnonzero(marks == T + 2):
            marks[i] = self._resolve_ambiguous(rng) - T - 1
        idx = np.flatnonzero(np.abs(marks) == T + 1)
        if tails and idx.size:
            marks[idx] = np.sign(marks[idx]) * (T + 1 + self._tail(idx.size, rng))
        return marks

    def _resolve_ambiguous(self, rng: np.random.Generator) -> int:
        """Outcome index of F^-1(V), V uniform in a uniformly chosen ambiguous cell (exact)."""
        cell = int(self._amb[int(rng.integers(0, len(self._amb)))])
        i0 = int(np.searchsorted(self._K, np.uint64(cell), side="left"))
        i1 = int(np.searchsorted(self._K, np.uint64(cell), side="right"))
        v, nb = cell, 0  # V lies in [v, v + 1) * 2^-(64 + nb)
        while True:
            v = (v << 64) | int(uniform_words(rng, 1)[0])
            nb += 64
            P = 64 + nb + 64
            F = self._cdf_at(P)
            lo_v, hi_v = v << (P - 64 - nb), (v + 1) << (P - 64 - nb)
            count = i0
            for f_lo, f_hi in F[i0:i1]:
                if f_hi <= lo_v:
                    count += 1           # F(b) <= V
                elif f_lo < hi_v:
                    break                # undecided: draw more bits of V
            else:
                return count

    def _tail(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n draws of G >= 0 with P(G = g) proportional to w(T + 1 + g)."""
        if self.law.pure:  # Laplace, memoryless: G is geometric with ratio exp(-x)
            return self._geometric(n, rng)
        # Gaussian: w(T+1+g) / w(T+1) = exp(-2x(T+1) g) exp(-x g^2): geometric proposal, exact acceptance
        if self._proposal is None:
            self._proposal = cached_sampler("laplace", 2 * self.x * (self.T + 1))
        g = np.empty(n, dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            y = self._proposal._geometric(todo.size, rng)
            ok = np.array([bernoulli_exp(self.x * int(v) ** 2, rng) for v in y], dtype=bool)
            g[todo[ok]] = y[ok]
            todo = todo[~ok]
        return g

    def _geometric(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Laplace only: n draws of G >= 0 with P(G = g) proportional to exp(-x g).

        G = L M + R, with M geometric with ratio exp(-x L) (the sampler of
        that law, Y' | Y' >= 0) and R, independent of M, with P(R = r)
        proportional to exp(-x r) on [0, L): P(M = m, R = r) is proportional
        to exp(-x (L m + r)), and (m, r) -> L m + r is one-to-one onto g >= 0.

        R for T >= 2 (L = T): one table draw Y (tails left unresolved) folded,
        r = Y for 0 <= Y < T and r = -Y - 1 for -T <= Y < 0, so
        P(r) = c (q^r + q^(r+1)) = c (1 + q) q^r with q = exp(-x); Y = T and
        the tails are rejected. Acceptance about (1 + P(|Y| <= T)) / 2 minus
        P(Y = T), 0.81 when the capped table leaves 19% to the tails (b = 8e4),
        against about 0.40 for Y | 0 <= Y <= T. For T = 1 (L = 2):
        R = Y | 0 <= Y <= 1.
        """
        T = self.T
        if T >= 2:
            L = T
            y = self._conditional(n, rng, -T, T - 1, tails=False)
            r = np.where(y >= 0, y, -y - 1)
        else:
            L = T + 1
            r = self._conditional(n, rng, 0, T, tails=False)
        if self._coarse is None:
            self._coarse = cached_sampler("laplace", self.x * L)
        mq = self._coarse._conditional(n, rng, 0, None, tails=True)
        return L * mq + r

    def _conditional(self, n: int, rng: np.random.Generator, lo: int, hi: int | None, tails: bool) -> np.ndarray:
        """n draws of Y | lo <= Y (<= hi), by rejection."""
        g = np.empty(n, dtype=np.int64)
        todo = np.arange(n)
        while todo.size:
            y = self._draw(todo.size, rng, tails)
            ok = (y >= lo) if hi is None else ((y >= lo) & (y <= hi))
            g[todo[ok]] = y[ok]
            todo = todo[~ok]
        return g
