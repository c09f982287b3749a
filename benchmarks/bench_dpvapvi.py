"""Benchmark: DP-VAPVI at K = 10^6 episodes (2 x 10^7 rows) on the synthetic linear MDP.

Prints wall time of (1) simulating the logs (privaudit.mdp.simulate, in chunks
of 10^5 episodes kept as compact numpy columns), (2) aggregating the rows per
step (LinearData.from_rows: the dedupe over (s, a, s')), (3) DP-VAPVI's fit,
and the peak resident memory of the process (ru_maxrss). Target: fit +
aggregation under 60 s and peak under 2 GB on 2 cores.

Usage: python benchmarks/bench_dpvapvi.py [--episodes 1000000] [--rho 5]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from privaudit.learners.linear import DPVAPVI, LinearData
from privaudit.mdp.simulate import simulate
from privaudit.mdp.synthetic_linear import behaviour_policy, synthetic_linear_features, synthetic_linear_mdp
from privaudit.mdp.tabular import evaluate_policy, value_iteration


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=1_000_000)
    ap.add_argument("--rho", type=float, default=5.0)
    ap.add_argument("--chunk", type=int, default=100_000)
    args = ap.parse_args(argv)
    mdp, fmap = synthetic_linear_mdp(0), synthetic_linear_features()
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    cols = {c: [] for c in ("step", "state", "action", "reward", "next_state")}
    for g in rng.spawn(-(-args.episodes // args.chunk)):
        df = simulate(mdp, behaviour_policy(), args.chunk, g)
        for c, dt in (("step", np.int8), ("state", np.int8), ("action", np.int8), ("reward", np.float32),
                      ("next_state", np.int8)):
            cols[c].append(df[c].to_numpy().astype(dt))
        del df
    cols = {c: np.concatenate(v) for c, v in cols.items()}
    t1 = time.perf_counter()
    n = len(cols["step"])
    data = LinearData.from_rows(cols["step"], cols["state"], cols["action"], cols["reward"].astype(np.float64),
                                cols["next_state"], np.zeros(n, bool), H=20, S=2, A=100, n_episodes=args.episodes)
    t2 = time.perf_counter()
    est = DPVAPVI(args.rho).fit(data, fmap, rng=np.random.default_rng(1))
    t3 = time.perf_counter()
    gap = value_iteration(mdp)[2] - evaluate_policy(mdp, est.table_)
    print(f"K = {args.episodes:,} episodes, {n:,} rows, rho = {args.rho}")
    print(f"simulate (not part of the learner): {t1 - t0:.2f} s")
    print(f"aggregate per step (from_rows):     {t2 - t1:.2f} s")
    print(f"DP-VAPVI fit:                       {t3 - t2:.3f} s")
    print(f"learner total (aggregate + fit):    {t3 - t1:.2f} s")
    print(f"peak resident memory (whole process): {peak_mb():.0f} MB")
    print(f"sub-optimality v* - v^pi:           {gap:.4f}")


if __name__ == "__main__":
    main()
