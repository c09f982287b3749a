"""Simulation speed: ICU-Sepsis episodes per second and peak memory.

Run: python benchmarks/bench_simulate.py [--episodes 100000] [--seed 0]
Prints the time to load the MDP, to simulate (CDF build included), to write
Parquet, and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from privaudit.mdp.icu_sepsis import clinicians_policy, load_icu_sepsis
from privaudit.mdp.simulate import simulate, write_logs


def run(episodes: int, seed: int) -> dict:
    t0 = time.perf_counter()
    mdp = load_icu_sepsis(horizon=20)
    pi = clinicians_policy()
    t1 = time.perf_counter()
    df = simulate(mdp, pi, episodes, rng=np.random.default_rng(seed))
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        path = write_logs(df, Path(d) / "logs.parquet")
        size = path.stat().st_size
    t3 = time.perf_counter()
    return {"episodes": episodes, "rows": df.height, "load_s": t1 - t0, "simulate_s": t2 - t1,
            "write_s": t3 - t2, "parquet_MB": size / 1e6,
            "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    r = run(a.episodes, a.seed)
    print(f"ICU-Sepsis, clinicians' policy, H=20: {r['episodes']} episodes, {r['rows']} rows")
    print(f"  load MDP    {r['load_s']:.2f} s")
    print(f"  simulate    {r['simulate_s']:.2f} s  ({r['episodes'] / r['simulate_s']:,.0f} episodes/s, "
          f"{r['rows'] / r['simulate_s']:,.0f} rows/s)")
    print(f"  write       {r['write_s']:.2f} s  ({r['parquet_MB']:.2f} MB Parquet, zstd)")
    print(f"  peak RSS    {r['peak_rss_MB']:.0f} MB")


if __name__ == "__main__":
    main()
