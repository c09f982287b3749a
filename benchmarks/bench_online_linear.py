"""Benchmark: each linear explorer for K = 10^5 users of the synthetic linear MDP (d = 10, H = 20).

Issue 16 asks for at most 5 minutes per algorithm on 2 cores and memory
independent of K. Each (algorithm, K) runs in a fresh subprocess that reports
its wall time and peak resident memory (``ru_maxrss``); running K = 10^4 and
10^5 shows whether the memory grows with K (the runner's per-episode output
arrays, 4 x 8 bytes per user, are the only O(K) part).

Usage::

    python benchmarks/bench_online_linear.py [--episodes 100000 10000] [--algos ...] [--rho 1]
        [--constants practical] [--out benchmarks/results/online_linear.json] [--progress DIR]

Prints one line per run and writes the JSON table. On a shared machine the
wall time depends on the load; the CPU time (user + system of the child) is
the figure to compare with the 5-minute target. Each child runs with one BLAS
thread (``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` = 1
unless set in the environment), as the Figure-1 experiment does: the arrays
are tiny, and BLAS threads cost CPU without speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Environment variables that set the BLAS thread count of a child (1 unless already set).
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

_CHILD = r"""
import json, resource, sys, time
import numpy as np
sys.path.insert(0, {root!r})
from privaudit.online.env import make_env
from privaudit.online.linear.build import LINEAR_ALGOS, make_linear_agent
from privaudit.online.protocol import run_episodes
algo, K, rho, which = {algo!r}, {K}, {rho}, {which!r}
env = make_env("synthetic-linear", world_key=0)
reward = np.stack([env.mdp.expected_reward(h) for h in range(env.horizon)])
agent = make_linear_agent(algo, env.phi, reward, env.horizon, K,
                          rho=rho if LINEAR_ALGOS[algo] else float("inf"), constants=which,
                          rng=np.random.default_rng(0))
t0 = time.perf_counter()
progress_path, done = {progress!r}, [0]

def tick(n):  # every 1%: episodes done, CPU seconds, peak RSS (partial results survive a killed run)
    done[0] += n
    if progress_path:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        with open(progress_path, "a") as f:
            f.write(f"{{done[0]}} {{ru.ru_utime + ru.ru_stime:.2f}} {{ru.ru_maxrss / 1024:.1f}}\n")

res = run_episodes(env, agent, K, progress=tick)
wall = time.perf_counter() - t0
state = sum(v.nbytes for v in vars(agent).values() if isinstance(v, np.ndarray))
parts = [agent.stats] + [o for o in (getattr(agent, "lat", None),) if o is not None]
state += sum(v.nbytes for o in parts for v in vars(o).values() if isinstance(v, np.ndarray))
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"algo": algo, "episodes": K, "seconds": wall, "cpu_seconds": ru.ru_utime + ru.ru_stime,
                  "peak_rss_mib": ru.ru_maxrss / 1024,
                  "agent_array_bytes": state, "switches": agent.n_switches,
                  "cumulative_regret": float(res.regret.sum()),
                  "lattice": None if getattr(agent, "lattice", None) is None else vars(agent.lattice),
                  "noise_draw_calls": getattr(agent.noise, "counts", None),
                  "mean_regret_last_10pct": float(res.regret[-K // 10:].mean())}}))
"""


def run_one(algo: str, K: int, rho: float, which: str, progress: str = "") -> dict:
    """Run one (algorithm, K) in a fresh interpreter; returns its measurements.

    ``progress``: a directory where the child appends "episodes cpu_seconds peak_rss_mib"
    every 1% of the run (``<algo>_<K>.progress``); empty: none.
    """
    path = str(Path(progress) / f"{algo}_{K}.progress") if progress else ""
    code = _CHILD.format(root=str(ROOT), algo=algo, K=K, rho=rho, which=which, progress=path)
    env = dict(os.environ)
    for var in BLAS_THREAD_VARS:   # one BLAS thread in the child unless set explicitly
        env.setdefault(var, "1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, nargs="+", default=[100_000, 10_000])
    ap.add_argument("--algos", nargs="+",
                    default=["lsvi-ucb", "lsvi-ucb-pp", "luyo", "ngo", "dp-lsvi-ucb-pp"])
    ap.add_argument("--rho", type=float, default=1.0)
    ap.add_argument("--constants", default="practical")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "online_linear.json"))
    ap.add_argument("--progress", default="", help="directory for per-1%% progress lines (episodes, CPU s, RSS)")
    args = ap.parse_args(argv)
    rows = []
    for algo in args.algos:
        for K in args.episodes:
            r = run_one(algo, K, args.rho, args.constants, args.progress)
            rows.append(r)
            print(f"{algo:15s} K={K:>7d}: {r['seconds']:7.1f} s wall, {r['cpu_seconds']:7.1f} s CPU, peak RSS {r['peak_rss_mib']:6.1f} MiB, "
                  f"agent arrays {r['agent_array_bytes'] / 1024:6.1f} KiB, switches {r['switches']}, "
                  f"regret {r['cumulative_regret']:.0f}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    Path(args.out).write_text(json.dumps({"rho": args.rho, "constants": args.constants,
                                          "load_average_at_end": load, "runs": rows},
                                         indent=2) + "\n")


if __name__ == "__main__":
    main()
