"""Speed of privaudit.privacy.mechanisms.add_noise in each noise mode.

Prints samples per second for rounded and exact Gaussian / Laplace noise at
the ICU-Sepsis scales (H = 20, visits + transitions, k = 1: sigma =
sqrt(2H/rho), b = 4H/eps), the time of one (S, A, S) = 716 x 25 x 716 h-slice
(12.8 M cells) in rounded mode, and OpenDP's samplers for comparison when
``opendp`` is installed. Usage: python benchmarks/bench_noise.py [--cells N]
"""

from __future__ import annotations

import argparse
import math
import time
import tracemalloc

import numpy as np

from privaudit.privacy.mechanisms import add_noise


def rate(fn, n):
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=2_000_000)
    args = ap.parse_args(argv)
    n = args.cells
    H, rho, eps = 20, 1.0, 1.0
    cases = [("gaussian", math.sqrt(2 * H / rho)), ("gaussian", math.sqrt(2 * H / 0.01)),
             ("laplace", 4 * H / eps)]
    zeros = np.zeros(n, dtype=np.int64)
    rng = np.random.default_rng(0)
    print(f"add_noise, {n:,} cells per run (samples/second)")
    for mech, scale in cases:
        for mode in ("rounded", "exact"):
            r = rate(lambda: add_noise(zeros, mechanism=mech, scale=scale, rng=rng, noise=mode), n)
            print(f"  {mech:8s} scale={scale:8.2f} {mode:8s} {r / 1e6:8.2f} M/s")
    S, A = 716, 25
    slice_ = np.zeros((S, A, S), dtype=np.int64)
    tracemalloc.start()
    t = time.perf_counter()
    add_noise(slice_, mechanism="gaussian", scale=math.sqrt(40), rng=rng)
    dt = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"one ICU-Sepsis h-slice (S, A, S) = {slice_.size:,} cells, rounded gaussian: "
          f"{dt:.2f} s, peak traced memory {peak / 2**20:.0f} MiB (slice {slice_.nbytes / 2**20:.0f} MiB)")
    try:
        import opendp.prelude as dp
    except ImportError:
        print("opendp not installed: no comparison")
        return
    dp.enable_features("contrib")
    m = min(n, 200_000)
    x = [0] * m
    g = (dp.vector_domain(dp.atom_domain(T=int), size=m), dp.l2_distance(T=int)) >> \
        dp.m.then_gaussian(scale=math.sqrt(40))
    lap = (dp.vector_domain(dp.atom_domain(T=int), size=m), dp.l1_distance(T=int)) >> \
        dp.m.then_laplace(scale=80.0)
    print(f"opendp (exact, OS randomness, not seedable), {m:,} cells:")
    print(f"  gaussian scale=6.32 {rate(lambda: g(x), m) / 1e6:8.2f} M/s")
    print(f"  laplace  scale=80   {rate(lambda: lap(x), m) / 1e6:8.2f} M/s")


if __name__ == "__main__":
    main()
