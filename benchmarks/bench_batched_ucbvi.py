"""Batched DP-UCBVI at (1, 1e-6)-JDP against its non-private twin and privaudit's UCB-VI: regret and CPU time.

For each environment and algorithm, one run of K users (``run_explore``, the code ``privaudit explore``
runs) in a fresh subprocess; prints and appends to --out one JSON line per run: cumulative regret,
mean regret per user over the first and the last 10% of users, wall and CPU seconds, and the regret per
user of three policies that learn nothing (uniform play, always action 0, reward-greedy: reference levels).

Targets (issue 31): RiverSwim defaults (H = 20, S = 6), K = 1e5, (1, 1e-6)-JDP: last-10% mean regret
<= 0.5 and cumulative regret <= 3x UCB-VI's in the same run; the K = 1e5 run in at most 2 CPU minutes.

Usage: python benchmarks/bench_batched_ucbvi.py [--env riverswim] [--episodes 100000]
       [--algos dp-ucbvi-batched ucbvi-batched ucb-vi] [--seeds 0] [--growth G] [--out FILE.jsonl]

``--growth G``: the batched explorers' schedule ratio (default: the explorer's ``DEFAULT_GROWTH``, what
``privaudit explore`` runs); the line then carries ``"growth": G``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: environment name -> make_env options (ICU-Sepsis at H = 20, as the issue asks); "random-tabular-a0.1" is the
#: default random MDP's sizes and instance with near-deterministic transitions (Dirichlet alpha = 0.1), where
#: the reward-greedy policy is far from optimal (0.38 per user against 0.016 at alpha = 1)
ENVS = {"riverswim": {}, "random-tabular": {}, "random-tabular-a0.1": {"alpha": 0.1}, "icu-sepsis": {"horizon": 20}}


def make(env_name: str):
    """The environment of one line of :data:`ENVS`."""
    from privaudit.mdp.random_tabular import random_tabular_mdp
    from privaudit.online.env import ENV_DEFAULTS, EpisodicEnv, make_env
    opts = ENVS[env_name]
    if "alpha" not in opts:
        return make_env(env_name, **opts)
    d = ENV_DEFAULTS["random-tabular"]
    return EpisodicEnv(random_tabular_mdp(d["states"], d["actions"], d["horizon"], d["instance_seed"], alpha=opts["alpha"]),
                       name=env_name)


def one(env_name: str, algo: str, K: int, seed: int, growth: float | None = None) -> dict:
    """One run in this process; returns its regret summary and timings (``growth``: batched explorers only)."""
    sys.path.insert(0, str(ROOT))
    import numpy as np
    from privaudit.mdp.tabular import reference_regrets
    from privaudit.online.explore import run_explore, validate_budget
    from privaudit.online.protocol import run_episodes
    from privaudit.online.tabular.batched_ucb import build
    from privaudit.privacy.budget import resolve_budget

    env = make(env_name)
    rho = resolve_budget(epsilon=1.0, delta=1e-6).rho
    budget = validate_budget(algo, None, rho, 1e-6) if algo.startswith("dp-") else None
    t0, c0 = time.perf_counter(), time.process_time()
    if growth is None:
        _, res = run_explore(env, algo, K, budget, seed=seed)
    else:   # what run_explore builds (the registry's builder, default_rng(seed)), at another schedule
        agent = build(env, K, budget, "practical", 0.05, np.random.default_rng(seed), algo=algo, growth=growth)
        res = run_episodes(env, agent, K)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    tenth = max(1, K // 10)
    return {"env": env_name, "algo": algo, "K": K, "seed": seed, "budget": "(1, 1e-6)-JDP" if budget else "none",
            "cumulative_regret": round(float(res.regret.sum()), 1),
            "mean_regret_first_10pct": round(float(res.regret[:tenth].mean()), 4),
            "mean_regret_last_10pct": round(float(res.regret[-tenth:].mean()), 4),
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "reference_per_user": {k: round(v, 4) for k, v in reference_regrets(env.mdp).items()},
            **({} if growth is None else {"growth": growth})}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", nargs="+", default=["riverswim"], choices=sorted(ENVS))
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--algos", nargs="+", default=["dp-ucbvi-batched", "ucbvi-batched", "ucb-vi"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--growth", type=float, default=None, help="batch schedule ratio (batched explorers only)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--single", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.growth is not None and any("batched" not in a for a in args.algos):
        ap.error("--growth applies to the batched explorers only (dp-ucbvi-batched, ucbvi-batched).")
    if args.single is not None:
        env_name, algo, seed = args.single
        print(json.dumps(one(env_name, algo, args.episodes, int(seed), args.growth)))
        return
    print("load average before:", " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    for env_name in args.env:
        for seed in args.seeds:
            for algo in args.algos:
                grow = [] if args.growth is None else ["--growth", str(args.growth), "--algos", algo]
                out = subprocess.run([sys.executable, __file__, "--episodes", str(args.episodes), *grow,
                                      "--single", env_name, algo, str(seed)], capture_output=True, text=True)
                line = out.stdout.strip().splitlines()[-1] if out.returncode == 0 else json.dumps(
                    {"env": env_name, "algo": algo, "seed": seed, "error": out.stderr.strip().splitlines()[-1]})
                print(line, flush=True)
                if args.out is not None:
                    with open(args.out, "a") as f:
                        f.write(line + "\n")


if __name__ == "__main__":
    main()
