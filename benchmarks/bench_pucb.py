"""PUCB throughput and memory on the random tabular MDP (S = 10, A = 5, H = 10).

Runs PUCB (Laplace counters, eps = 1, practical constants) for each K in
--episodes, each in a fresh subprocess so that its peak RSS is its own, and
prints wall time, CPU time, microseconds per episode and peak RSS. Memory
independent of K: the agent holds (L + 2) arrays per counter family
(L = floor(log2 K) + 1) and the regret evaluator a fixed batch; only the
(K,) output arrays grow (40 bytes per episode).

Target (issue 15): K = 10^5 in at most 2 minutes on 2 cores.

Usage: python benchmarks/bench_pucb.py [--episodes 10000 100000] [--epsilon 1] [--algo pucb]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(K: int, epsilon: float, algo: str) -> dict:
    """Run one K in this process; returns timings and peak RSS."""
    sys.path.insert(0, str(ROOT))
    from privaudit.online.env import make_env
    from privaudit.online.explore import run_explore, validate_budget

    env = make_env("random-tabular", states=10, actions=5, horizon=10, instance_seed=0)
    budget = validate_budget(algo, epsilon if algo == "pucb" else None, None, None)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0, c0 = time.perf_counter(), time.process_time()
    _, res = run_explore(env, algo, K, budget, seed=0)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"K": K, "algo": algo, "epsilon": epsilon, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "us_per_episode": round(1e6 * wall / K, 1), "peak_rss_mb": round(rss / 1024, 1),
            "rss_before_run_mb": round(rss0 / 1024, 1), "cumulative_regret": float(res.regret.sum()),
            "mean_regret_last_10pct": float(res.regret[-max(1, K // 10):].mean())}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--algo", default="pucb", choices=["pucb", "ucb-vi"])
    ap.add_argument("--single", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.single is not None:
        print(json.dumps(one(args.single, args.epsilon, args.algo)))
        return
    print("load average before:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    for K in args.episodes:
        out = subprocess.run([sys.executable, __file__, "--single", str(K), "--epsilon", str(args.epsilon),
                              "--algo", args.algo], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{r['algo']} K={K:>7}: wall {r['wall_s']:7.1f} s, CPU {r['cpu_s']:7.1f} s, "
              f"{r['us_per_episode']:7.1f} us/episode, peak RSS {r['peak_rss_mb']:6.1f} MB "
              f"(before the run {r['rss_before_run_mb']:.1f} MB), cumulative regret {r['cumulative_regret']:.0f}, "
              f"last-10% mean regret {r['mean_regret_last_10pct']:.3f}")
    print("load average after:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))


if __name__ == "__main__":
    main()
