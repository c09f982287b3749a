"""Projection (Qiao & Wang 2023, eq. (2)) over all (h, s, a) vs a per-(h, s, a) linprog loop.

ICU-Sepsis shape H = 20, S = 716, A = 25 (358,000 rows of length 716). The
noisy counts are simulated like a release at rho = 1 (sigma^2 = 2H/rho = 40):
exact counts from 1 M episodes spread over the cells by a random behaviour,
plus Gaussian noise, clipped at 0. project_counts runs per h (17,900 rows at a
time); the linprog loop is timed on a sample of rows and extrapolated.
Usage: python benchmarks/bench_projection.py [--h-steps 20] [--lp-rows 100]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy.optimize import linprog

from privaudit.privacy.mechanisms import noise_bound
from privaudit.privacy.projection import project_counts


def noisy_slice(rng, S, A, episodes, sigma):
    """One h: (S, A, S) noisy transition counts and (S, A) noisy visits, clipped at 0."""
    visits = rng.multinomial(episodes, rng.dirichlet(np.full(S * A, 0.05))).reshape(S, A)
    trans = np.zeros((S, A, S))
    rows = np.nonzero(visits)
    for s, a in zip(*rows):  # exact counts only; fine for a benchmark's data generation
        trans[s, a] = rng.multinomial(visits[s, a], rng.dirichlet(np.full(S, 0.02)))
    n_sas = np.maximum(0.0, np.rint(trans + rng.normal(0, sigma, trans.shape)))
    n_sa = np.maximum(0.0, np.rint(visits + rng.normal(0, sigma, visits.shape)))
    return n_sas, n_sa


def lp_row(a, b, e):
    S = a.size
    c = np.zeros(S + 1)
    c[-1] = 1.0
    eye = np.eye(S)
    A_ub = np.vstack([np.hstack([eye, -np.ones((S, 1))]), np.hstack([-eye, -np.ones((S, 1))]),
                      np.hstack([np.ones((1, S)), [[0.0]]]), np.hstack([-np.ones((1, S)), [[0.0]]])])
    b_ub = np.concatenate([a, -a, [b + e], [-(b - e)]])
    return linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=[(0, None)] * (S + 1), method="highs").x[-1]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--h-steps", type=int, default=20, help="h-slices to project (of H = 20)")
    ap.add_argument("--lp-rows", type=int, default=100, help="rows solved by linprog")
    args = ap.parse_args(argv)
    H, S, A, rho, delta = 20, 716, 25, 1.0, 0.05
    sigma = math.sqrt(2 * H / rho)
    E = noise_bound("gaussian", sigma, 2 * H * S * S * A, delta)
    rng = np.random.default_rng(0)
    n_sas, n_sa = noisy_slice(rng, S, A, 1_000_000, sigma)
    total = cpu = 0.0
    max_dev = 0.0
    for h in range(args.h_steps):
        t, c = time.perf_counter(), time.process_time()
        x, tot = project_counts(n_sas, n_sa, E)
        total += time.perf_counter() - t
        cpu += time.process_time() - c
        max_dev = max(max_dev, float(np.abs(x - n_sas).max()))
    per_h = total / args.h_steps
    print(f"E_rho = {E:.1f} (rho = {rho}, delta = {delta}); max deviation seen {max_dev:.2f} <= E/2")
    print(f"project_counts: {per_h:.3f} s per h (17,900 rows x 716), "
          f"{per_h * H:.1f} s for all H = {H} steps ({S * A * H:,} rows); "
          f"CPU time {cpu / args.h_steps:.3f} s per h")
    idx = rng.choice(S * A, size=args.lp_rows, replace=False)
    a2, b1 = n_sas.reshape(-1, S), n_sa.reshape(-1)
    t = time.perf_counter()
    worst = 0.0
    for i in idx:
        t_lp = lp_row(a2[i], b1[i], E / 2)
        worst = max(worst, abs(t_lp - np.abs(x.reshape(-1, S)[i] - a2[i]).max()))
    per_row = (time.perf_counter() - t) / args.lp_rows
    loop = per_row * S * A * H
    print(f"linprog loop: {per_row * 1e3:.1f} ms per row on {args.lp_rows} rows -> "
          f"{loop:.0f} s extrapolated to {S * A * H:,} rows; "
          f"max |t_lp - t_ours| = {worst:.2e}")
    print(f"speed-up: {loop / (per_h * H):.0f}x")


if __name__ == "__main__":
    main()
