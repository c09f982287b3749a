"""Batched DP-UCBVI's CPU time: one K = 1e5 run, and R runs in lockstep against R separate runs.

Modes, each in a fresh subprocess (CPU seconds of that process, after the imports and the
environment are built; a shared machine's load inflates wall time, not CPU time much):

* ``single-user-by-user``: one run played user by user (``env.rollout`` per user; what
  ``run_episodes`` did before batched explorers shared their policy over a batch);
* ``single``: one run (``run_explore``: each batch's users rolled out together);
* ``separate``: R runs one after the other (``run_explore`` per seed);
* ``separate-user-by-user``: the same, user by user;
* ``lockstep``: the same R runs together (``explore_lockstep``).

Every mode prints each run's cumulative regret and a digest of its released counts, so the
lines show that the modes compute the same runs (they must be equal, seed by seed).

Targets (issue 31 item 5): the K = 1e5 run on RiverSwim at (1, 1e-6)-JDP in at most 2 CPU
minutes; R = 5 seeds in lockstep for far less than 5 separate runs.

Usage: python benchmarks/bench_lockstep.py [--env riverswim] [--episodes 100000] [--runs 5]
       [--modes single-user-by-user single separate lockstep] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from childproc import ChildFailed, run_child

ROOT = Path(__file__).resolve().parents[1]
MODES = ("single-user-by-user", "single", "separate-user-by-user", "separate", "lockstep")
ALGO = "dp-ucbvi-batched"
#: environment name -> make_env options (ICU-Sepsis at H = 20, as issue 31 asks)
ENVS = {"riverswim": {}, "random-tabular": {}, "icu-sepsis": {"horizon": 20}}


def one(mode: str, env_name: str, K: int, R: int) -> dict:
    """One mode in this process; returns its CPU time and the runs' summaries."""
    sys.path.insert(0, str(ROOT))
    import numpy as np
    from privaudit.online.env import make_env
    from privaudit.online.explore import build_agent, run_explore, validate_budget
    from privaudit.online.lockstep import explore_lockstep
    from privaudit.online.protocol import run_episodes
    from privaudit.privacy.budget import resolve_budget

    env = make_env(env_name, **ENVS[env_name])
    budget = validate_budget(ALGO, None, resolve_budget(epsilon=1.0, delta=1e-6).rho, 1e-6)
    seeds = list(range(1 if mode.startswith("single") else R))
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "lockstep":
        runs = explore_lockstep([env], ALGO, K, [budget], seeds=seeds)
    elif mode.endswith("user-by-user"):
        runs = []
        for s in seeds:
            agent = build_agent(env, ALGO, K, budget, seed=s)
            agent.policy_users = None     # run_episodes then plays it user by user (the path before lockstep)
            runs.append((agent, run_episodes(env, agent, K)))
    else:
        runs = [run_explore(env, ALGO, K, budget, seed=s) for s in seeds]
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tenth = max(1, K // 10)
    return {"mode": mode, "env": env_name, "algo": ALGO, "K": K, "runs": len(seeds), "budget": "(1, 1e-6)-JDP",
            "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "cumulative_regret": [round(float(r.regret.sum()), 3) for _, r in runs],
            "mean_regret_last_10pct": [round(float(r.regret[-tenth:].mean()), 4) for _, r in runs],
            "released_sha256": [hashlib.sha256(np.ascontiguousarray(a.released_).tobytes()).hexdigest()[:12]
                                for a, _ in runs],
            "numpy": np.__version__, "python": sys.version.split()[0]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="riverswim", choices=sorted(ENVS))
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5, help="R, runs of the separate and lockstep modes")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(one(args.child, args.env, args.episodes, args.runs)))
        return
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print("commit", commit, "| load average before:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    for mode in args.modes:
        try:
            row = run_child(__file__, mode, "--env", args.env, "--episodes", args.episodes, "--runs", args.runs)
        except ChildFailed as e:
            row = {"mode": mode, "error": str(e).splitlines()[-1]}
        print(json.dumps(row), flush=True)
        if args.out is not None:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")

if __name__ == "__main__":
    main()
