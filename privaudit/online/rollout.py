"""Many users' episodes at once: the environment's response trees, vectorised over users.

:meth:`privaudit.online.env.EpisodicEnv.rollout` plays one user with numpy's Philox
bit generator, one block per step. When many users follow known policies (the users of
one batch of a batched explorer, or the same users in R independent runs played in
lockstep) their episodes are independent given the policies, so the blocks of step h of
all of them can be computed together. :func:`philox4x64` is Philox4x64-10 (Salmon,
Moraes, Dror & Shaw 2011, "Parallel random numbers: as easy as 1, 2, 3"; the Random123
round function, constants and key schedule) on arrays of keys and counters, in numpy
uint64 arithmetic (the 128-bit product by 32-bit halves), so it returns exactly the
words numpy's ``Philox.random_raw`` returns for each (key, counter) (tested).
:func:`play` then decodes the blocks as ``EpisodicEnv.step`` does (inverse CDF by a
vectorised bisection equal to ``bisect_right``), so user k's states, actions and rewards
are the ones ``env.rollout(k, pi)`` returns, to the bit.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64
_M0, _M1 = _U64(0xD2E7470EE14C6C93), _U64(0xCA5A826395121157)    # Philox4x64 multipliers
_W0, _W1 = _U64(0x9E3779B97F4A7C15), _U64(0xBB67AE8584CAA73B)    # Weyl key increments
_LO32 = _U64(0xFFFFFFFF)
_S32 = _U64(32)
_S11 = _U64(11)
_TWO_M53 = 2.0 ** -53
#: Users per vectorised block in :func:`play` (bounds the working memory: about 1 KiB per user and step).
CHUNK = 1 << 15


def _mulhilo(m: np.uint64, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(high, low) 64-bit words of the 128-bit product m * x, elementwise (x uint64 array)."""
    m0, m1 = m & _LO32, m >> _S32
    x0, x1 = x & _LO32, x >> _S32
    p00, p01, p10 = m0 * x0, m0 * x1, m1 * x0
    mid = (p00 >> _S32) + (p01 & _LO32) + (p10 & _LO32)      # < 3 * 2^32: no overflow
    hi = m1 * x1 + (p01 >> _S32) + (p10 >> _S32) + (mid >> _S32)
    return hi, m * x


def philox4x64(key: np.ndarray, counter: np.ndarray) -> np.ndarray:
    """Philox4x64-10 blocks, as numpy's ``Philox(key=...)`` produces after its counter is set to ``counter``.

    Parameters
    ----------
    key : ndarray, shape (N, 2), uint64
    counter : ndarray, shape (N, 4), uint64
        The bit generator's counter; numpy increments it (by one, little-endian over the four
        words) before computing a block, so the block returned is Philox4x64-10 of counter + 1.

    Returns
    -------
    ndarray, shape (N, 4), uint64
    """
    c = [counter[:, i].copy() for i in range(4)]
    c[0] += _U64(1)                              # numpy's increment, with its carry
    carry = c[0] == 0
    for i in (1, 2, 3):
        c[i] += carry.astype(_U64)
        carry &= c[i] == 0
    k0, k1 = key[:, 0].copy(), key[:, 1].copy()
    for r in range(10):
        if r:
            k0 += _W0
            k1 += _W1
        hi0, lo0 = _mulhilo(_M0, c[0])
        hi1, lo1 = _mulhilo(_M1, c[2])
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return np.stack(c, axis=1)


def _bisect_right(table: np.ndarray, row: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``bisect_right(table[row[i]], u[i])`` for every i: table (rows, n) sorted along its last axis."""
    n = table.shape[-1]
    flat = table.reshape(-1)
    base = row * n
    lo = np.zeros(len(u), dtype=np.int64)
    hi = np.full(len(u), n, dtype=np.int64)
    for _ in range(int(n).bit_length()):           # ceil(log2(n + 1)) halvings close every interval
        active = lo < hi
        mid = (lo + hi) // 2
        left = u < flat[base + np.minimum(mid, n - 1)]
        hi = np.where(active & left, mid, hi)
        lo = np.where(active & ~left, mid + 1, lo)
    return lo


def play(keys: np.ndarray, pis: np.ndarray, which: np.ndarray, cdf: np.ndarray, rew: np.ndarray,
         d0cdf: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """N users' episodes under deterministic Markov policies, vectorised over users.

    User i (key ``keys[i]``) follows ``pis[which[i]]``; the blocks, states and rewards are those of
    ``EpisodicEnv.reset`` and ``EpisodicEnv.step`` (module docstring), in blocks of :data:`CHUNK` users.

    Parameters
    ----------
    keys : ndarray, shape (N, 2), uint64
        The users' keys.
    pis : ndarray, shape (P, H, S), int
        Policies, actions in [0, A) (checked by the caller).
    which : ndarray, shape (N,), int
        The policy of each user.
    cdf : ndarray, shape (H or 1, S, A, S)
        Cumulative transition probabilities, last entry exactly 1 (the environment's table).
    rew : ndarray, shape (H or 1, S, A) or (H or 1, S, A, S)
        Realised rewards (the environment's table; with the last axis: r(s, a, s')).
    d0cdf : ndarray, shape (S,)
        Cumulative initial distribution.

    Returns
    -------
    states : ndarray, shape (N, H + 1), int64
    actions : ndarray, shape (N, H), int64
    rewards : ndarray, shape (N, H), float64
    """
    N = len(keys)
    _, H, S = pis.shape
    A = cdf.shape[2]
    pis = pis.astype(np.int64, copy=False)
    states = np.empty((N, H + 1), dtype=np.int64)
    actions = np.empty((N, H), dtype=np.int64)
    rewards = np.empty((N, H), dtype=np.float64)
    for a0 in range(0, N, CHUNK):
        b0 = min(N, a0 + CHUNK)
        key, pol = keys[a0:b0], which[a0:b0].astype(np.int64)
        ctr = np.zeros((b0 - a0, 4), dtype=_U64)
        w = philox4x64(key, ctr)
        s = np.minimum(np.searchsorted(d0cdf, (w[:, 0] >> _S11) * _TWO_M53, "right"), S - 1)
        states[a0:b0, 0] = s
        for h in range(H):   # sequential by nature: each step's block chains on the last
            a = pis[pol, h, s]
            ctr[:, 0], ctr[:, 1], ctr[:, 2], ctr[:, 3] = h + 1, a, w[:, 2], w[:, 3]
            w = philox4x64(key, ctr)
            u = (w[:, 0] >> _S11) * _TWO_M53
            hc = h if cdf.shape[0] > 1 else 0
            s_next = np.minimum(_bisect_right(cdf[hc].reshape(S * A, S), s * A + a, u), S - 1)
            hr = h if rew.shape[0] > 1 else 0
            rewards[a0:b0, h] = rew[hr, s, a, s_next] if rew.ndim == 4 else rew[hr, s, a]
            actions[a0:b0, h] = a
            states[a0:b0, h + 1] = s = s_next
    return states, actions, rewards
