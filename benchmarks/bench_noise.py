"""Speed of the noise samplers: ours (exact) next to numpy's float samplers and OpenDP's.

For each (mechanism, scale) at the ICU-Sepsis scales (H = 20, visits +
transitions, k = 1: sigma = sqrt(2H/rho), b = 4H/eps; rewards in units of
1/1000) prints samples per second of

* ``exact``: ``privaudit.privacy.samplers.exact_noise`` (exact discrete
  Gaussian / Laplace, total variation 0), one thread, and two threads with
  independent child generators (the 2-core rate);
* ``add_noise exact``: the same through ``mechanisms.add_noise`` (chunks of
  2^20 cells, added to an int64 array), the path a release takes;
* ``numpy``: ``Generator.normal`` / ``Generator.laplace`` (float, not exact),
  and ``add_noise rounded`` (those rounded to integers);
* the time to build the sampler's table (once per scale and process);

then the time of one ICU-Sepsis h-slice (S, A, S) = 716 x 25 x 716 (12.8 M
cells) in exact and rounded mode, and OpenDP's samplers (exact, OS randomness)
when ``opendp`` is installed. Each rate is the best of ``--repeat`` runs (the
machine is shared).

In place (the release path): ``add_noise(..., noise="exact", inplace=True)``
adds exact noise into a preallocated int64 array (``ExactSampler.add_into``:
no array of the output's size allocated), one thread; printed as samples per
wall second and per CPU second of the thread (``time.thread_time``: what the
sampler costs whatever else runs on the machine), next to numpy's
``Generator.normal(out=...)`` into a preallocated float64 array, first as the
machine is ("quiet": the load average is printed) and then with ``--load``
extra busy processes started by this script ("loaded").

Usage: python benchmarks/bench_noise.py [--cells N] [--repeat R] [--load K] [--inplace-only]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from privaudit.privacy import exact_sampler, samplers
from privaudit.privacy.mechanisms import add_noise


def best_rate(fn, n, repeat):
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def best_rates(fn, n, repeat):
    """(samples per wall second, samples per CPU second of this thread), each the best of ``repeat`` runs."""
    wall = cpu = math.inf
    for _ in range(repeat):
        t, c = time.perf_counter(), time.thread_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.thread_time() - c)
    return n / wall, n / max(cpu, 1e-9)


def _spin(stop):
    while not stop.is_set():
        pass


def inplace_section(n, repeat, load):
    """Rates of exact noise drawn in place, quiet then with ``load`` busy processes."""
    H = 20
    cases = [("gaussian", math.sqrt(2 * H / 1.0), "rho = 1 counts"),
             ("gaussian", math.sqrt(2 * H / 0.01), "rho = 0.01 counts"),
             ("laplace", 4 * H / 1.0, "eps = 1 counts"),
             ("gaussian", 1000 * math.sqrt(2 * H / 1.0), "rho = 1 rewards (x1000)")]
    rng = np.random.default_rng()
    out = np.zeros(n, dtype=np.int64)
    fout = np.empty(n, dtype=np.float64)
    for label, k in (("quiet", 0), ("loaded", load)):
        stop = mp.Event()
        procs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(k)]
        for p in procs:
            p.start()
        try:
            time.sleep(0.5 if k else 0)
            print(f"in place, {label} ({k} extra busy processes; load average {os.getloadavg()[0]:.1f}, "
                  f"{os.cpu_count()} cores), {n:,} cells per run, best of {repeat}: M samples/s")
            print(f"  {'mechanism':9s} {'scale':>9s} {'what':24s} {'path':>5s} {'wall':>7s} {'CPU':>7s} "
                  f"{'numpy std_normal(out=) CPU':>27s}")
            for mech, scale, what in cases:
                sampler = samplers.get_sampler(mech, scale)
                add_noise(out[:16], mechanism=mech, scale=scale, rng=rng, noise="exact", inplace=True)  # tables
                w, c = best_rates(lambda: add_noise(out, mechanism=mech, scale=scale, rng=rng, noise="exact",
                                                    inplace=True), n, repeat)
                _, cn = best_rates(lambda: rng.standard_normal(out=fout), n, repeat)
                path = "guide" if sampler._guide is not None else "alias"
                print(f"  {mech:9s} {scale:9.2f} {what:24s} {path:>5s} {w / 1e6:7.1f} {c / 1e6:7.1f} {cn / 1e6:27.1f}")
        finally:
            stop.set()
            for p in procs:
                p.join()


def two_threads(mech, scale, n, rng):
    """n exact draws split over two threads, each with its own child generator."""
    kids = rng.spawn(2)
    chunk = 1 << 20

    def work(r, m):
        for s in range(0, m, chunk):
            samplers.exact_noise(mech, scale, min(chunk, m - s), rng=r)

    with ThreadPoolExecutor(2) as ex:
        list(ex.map(work, kids, [n // 2, n - n // 2]))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--load", type=int, default=2, help="busy processes for the loaded in-place run")
    ap.add_argument("--inplace-only", action="store_true", help="only the in-place section")
    args = ap.parse_args(argv)
    n, R = args.cells, args.repeat
    inplace_section(n, R, args.load)
    if args.inplace_only:
        return
    H = 20
    cases = [("gaussian", math.sqrt(2 * H / 1.0), "rho = 1 counts"),
             ("gaussian", math.sqrt(2 * H / 0.01), "rho = 0.01 counts"),
             ("gaussian", 1000 * math.sqrt(2 * H / 1.0), "rho = 1 rewards (x1000)"),
             ("laplace", 4 * H / 1.0, "eps = 1 counts"),
             ("laplace", 4 * H / 0.1, "eps = 0.1 counts"),
             ("laplace", 1000 * 4 * H / 1.0, "eps = 1 rewards (x1000)")]
    zeros = np.zeros(n, dtype=np.int64)
    rng = np.random.default_rng()
    print(f"samples per second (M/s), {n:,} cells per run, best of {R}")
    print(f"{'mechanism':9s} {'scale':>9s} {'what':24s} {'build':>7s} {'exact':>7s} {'exact2T':>8s} "
          f"{'add_ex':>7s} {'numpy':>7s} {'add_rd':>7s}")
    for mech, scale, what in cases:
        exact_sampler.cached_sampler.cache_clear()
        t = time.perf_counter()
        samplers.get_sampler(mech, scale)
        build = time.perf_counter() - t
        ex = best_rate(lambda: samplers.exact_noise(mech, scale, n, rng=rng), n, R)
        ex2 = best_rate(lambda: two_threads(mech, scale, n, rng), n, R)
        add_ex = best_rate(lambda: add_noise(zeros, mechanism=mech, scale=scale, rng=rng, noise="exact"), n, R)
        flt = rng.normal if mech == "gaussian" else rng.laplace
        npy = best_rate(lambda: flt(0.0, scale, n), n, R)
        add_rd = best_rate(lambda: add_noise(zeros, mechanism=mech, scale=scale, rng=rng, noise="rounded"), n, R)
        print(f"{mech:9s} {scale:9.2f} {what:24s} {build:6.2f}s {ex / 1e6:7.1f} {ex2 / 1e6:8.1f} "
              f"{add_ex / 1e6:7.1f} {npy / 1e6:7.1f} {add_rd / 1e6:7.1f}")
    S, A = 716, 25
    slice_ = np.zeros((S, A, S), dtype=np.int64)
    sigma = math.sqrt(2 * H)
    for mode in ("exact", "rounded"):
        dt = 1 / best_rate(lambda: add_noise(slice_, mechanism="gaussian", scale=sigma, rng=rng, noise=mode), 1, R)
        print(f"one ICU-Sepsis h-slice (S, A, S) = {slice_.size:,} cells, gaussian sigma={sigma:.2f}, "
              f"{mode:7s}: {dt:.2f} s (x H = {H}: {H * dt:.1f} s of noise for a per-step release)")
    try:
        import opendp.prelude as dp
    except ImportError:
        print("opendp not installed: no comparison")
        return
    dp.enable_features("contrib")
    m = min(n, 200_000)
    x = [0] * m
    g = (dp.vector_domain(dp.atom_domain(T=int), size=m), dp.l2_distance(T=int)) >> \
        dp.m.then_gaussian(scale=sigma)
    lap = (dp.vector_domain(dp.atom_domain(T=int), size=m), dp.l1_distance(T=int)) >> \
        dp.m.then_laplace(scale=80.0)
    print(f"opendp {dp.__version__ if hasattr(dp, '__version__') else ''} (exact, OS randomness, "
          f"not seedable), {m:,} cells:")
    print(f"  gaussian scale={sigma:.2f} {best_rate(lambda: g(x), m, 1) / 1e6:8.3f} M/s")
    print(f"  laplace  scale=80   {best_rate(lambda: lap(x), m, 1) / 1e6:8.3f} M/s")


if __name__ == "__main__":
    main()
