"""Why DP-LSVI-UCB++ switches almost every episode: the noisy determinant test with no new data.

Sahu (2025)'s switch test (Algorithm 1 line 10) compares det Lambda-tilde_{k,h} with det Lambda-tilde_{k_last,h};
with fresh Gram noise per (k, h) (what its privacy proof needs) the two
determinants differ even when no user arrived in between, and its Lemma D.2
(the noisy Gram matrices grow monotonically) is false. This script measures,
at K = 10^5, H = 20, d = 10 and delta = 1e-5, for both constant sets and three
budgets, the standard deviation of log det of one released Gram matrix
(weighted data Gram of n users along random directions, weights 1/H^2, plus
(lambda + shift) I plus one GOE of the run's scale, eigenvalues floored) and
the probability that the test fires between two consecutive releases of the
same data (any of the H steps: log det difference >= ln 2).

Usage::

    python experiments/dp_lsvi_ucb_pp_switching.py [--draws 400] [--seed 0]

Prints one line per (constants, eps, n). Float GOE draws (the question is
about the test's statistics, not about privacy).
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from privaudit.online.linear.constants import Problem
from privaudit.online.linear.constants_pp import dp_lsvi_ucb_pp_constants
from privaudit.online.linear.numerics import psd_inverse
from privaudit.privacy.accounting import dp_to_zcdp

H, D, K, DELTA = 20, 10, 100_000, 1e-5


def spurious_switch_rate(which: str, eps: float, n_users: int, draws: int, rng: np.random.Generator) -> tuple:
    """(constants, sd of log det per step, P(switch between two releases of the same data))."""
    c = dp_lsvi_ucb_pp_constants(Problem(H, 2, 100, D, K), dp_to_zcdp(eps, DELTA), which)
    x = rng.normal(size=(n_users, D))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    base = (x.T @ x) / H ** 2 + (c.lam + c.shift) * np.eye(D)
    z = rng.normal(0.0, c.noise_gram, size=(draws, H, D, D))
    z = (z + np.swapaxes(z, -1, -2)) / math.sqrt(2.0)
    logdet = np.stack([psd_inverse(base + zi, c.floor)[1] for zi in z])             # (draws, H)
    switch = ((logdet[1:] - logdet[:-1]) >= math.log(2.0)).any(axis=1).mean()
    return c, float(logdet.std(axis=0).mean()), float(switch)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("| constants | eps | GOE entry s | shift | floor | users | sd(log det) per step | P(switch, same data) |")
    print("|---|---|---|---|---|---|---|---|")
    for which in ("practical", "theory"):
        for eps in (0.5, 5.0, 10.0):
            for n in (1_000, 100_000):
                c, sd, p = spurious_switch_rate(which, eps, n, args.draws, rng)
                print(f"| {which} | {eps:g} | {c.noise_gram:.2f} | {c.shift:.1f} | {c.floor:.1f} | {n:,} | "
                      f"{sd:.3f} | {p:.2f} |")


if __name__ == "__main__":
    main()
