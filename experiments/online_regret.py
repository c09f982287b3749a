"""Cumulative regret of PUCB vs K on RiverSwim and a random MDP, several budgets and seeds.

Reproduce (the defaults are what fits in about 20 minutes on a shared 2-core
machine; the issue's full grid is ``--episodes 100000 --seeds 10``)::

    python experiments/online_regret.py --episodes 20000 --seeds 3 --jobs 2

Protocol
--------
* Environments (``privaudit.online.env.make_env``): RiverSwim (S = 6, A = 2,
  H = 20, start in state 0) and the seeded random tabular MDP (S = 10, A = 5,
  H = 10, instance 0). Users are response trees keyed by (world_key = seed, k).
* Algorithms: PUCB with Laplace counters at eps in {0.5, 1, 2, 5} and its
  non-private twin (eps = inf, UCB-VI), constant set ``--constants``
  (default practical; docs/online.md). Agent noise seeded by the seed.
* Regret: exact V*_0(s_0^k) - V^{pi_k}_0(s_0^k) per episode (the runner's
  batched evaluation), cumulated; checkpoints at log-spaced K.
* Slope: least-squares slope of log(cumulative regret) against log K over
  the checkpoints in [K/10, K] (1 = linear regret, 0.5 = sqrt(K)).
* Stated rate (Chowdhury & Zhou 2022 for PUCB; Qiao & Wang Table 1):
  O~(sqrt(S^2 A H^3 T) + S^2 A H^3 / eps), T = K H: slope 0.5 once K is
  large enough that the privacy term S^2 A H^3 / eps is paid; before that,
  regret is linear. The script prints both terms (constants and logs = 1)
  next to the measured regret.

Writes ``experiments/results/online_regret.json`` and
``docs/img/online_regret.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from privaudit.online.env import make_env  # noqa: E402
from privaudit.online.explore import run_explore, validate_budget  # noqa: E402

ENVS = {"riverswim": {}, "random-tabular": {"states": 10, "actions": 5, "horizon": 10, "instance_seed": 0}}


def checkpoints(K: int) -> np.ndarray:
    """About 30 log-spaced episode counts in [10, K]."""
    return np.unique(np.round(np.logspace(1, math.log10(K), 30)).astype(int))


def one_run(job: tuple) -> dict:
    env_name, eps, seed, K, constants = job
    env = make_env(env_name, world_key=seed, **ENVS[env_name])
    algo = "ucb-vi" if math.isinf(eps) else "pucb"
    budget = validate_budget(algo, None if algo == "ucb-vi" else eps, None, None)
    t0 = time.perf_counter()
    _, res = run_explore(env, algo, K, budget, constants=constants, seed=seed)
    cum = np.cumsum(res.regret)
    ks = checkpoints(K)
    return {"env": env_name, "epsilon": eps, "seed": seed, "K": K, "constants": constants,
            "checkpoints": ks.tolist(), "cumulative_regret": cum[ks - 1].tolist(),
            "seconds": time.perf_counter() - t0}


def slope(ks: np.ndarray, cum: np.ndarray) -> float:
    """Least-squares slope of log cum against log K over K in [K_max/10, K_max]."""
    sel = ks >= ks[-1] / 10
    return float(np.polyfit(np.log(ks[sel]), np.log(np.maximum(cum[sel], 1e-12)), 1)[0])


def stated_terms(env_name: str, K: int, eps: float) -> tuple[float, float]:
    env = make_env(env_name, **ENVS[env_name])
    S, A, H = env.n_states, env.n_actions, env.horizon
    return math.sqrt(S * S * A * H ** 3 * K * H), (S * S * A * H ** 3 / eps if math.isfinite(eps) else 0.0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1, 2, 5, math.inf])
    ap.add_argument("--envs", nargs="+", default=list(ENVS))
    ap.add_argument("--constants", default="practical", choices=["practical", "theory"])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "experiments/results/online_regret.json")
    ap.add_argument("--figure", type=Path, default=ROOT / "docs/img/online_regret.png")
    args = ap.parse_args(argv)
    jobs = [(e, eps, s, args.episodes, args.constants) for e in args.envs for eps in args.epsilons
            for s in range(args.seeds)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as ex:
        runs = list(ex.map(one_run, jobs))
    print(f"{len(runs)} runs of K={args.episodes} in {time.perf_counter() - t0:.0f} s "
          f"(mean {np.mean([r['seconds'] for r in runs]):.0f} s per run)")
    summary = []
    for e in args.envs:
        for eps in args.epsilons:
            rs = [r for r in runs if r["env"] == e and r["epsilon"] == eps]
            ks = np.array(rs[0]["checkpoints"])
            cum = np.array([r["cumulative_regret"] for r in rs])
            slopes = [slope(ks, c) for c in cum]
            sq, priv = stated_terms(e, args.episodes, eps)
            row = {"env": e, "epsilon": eps, "seeds": len(rs), "K": args.episodes,
                   "cumulative_regret_mean": float(cum[:, -1].mean()),
                   "cumulative_regret_sd": float(cum[:, -1].std(ddof=1)) if len(rs) > 1 else 0.0,
                   "slope_mean": float(np.mean(slopes)), "slope_min": float(np.min(slopes)),
                   "slope_max": float(np.max(slopes)),
                   "stated_sqrt_term": sq, "stated_privacy_term": priv}
            summary.append(row)
            print(f"{e:15s} eps={eps:<5}: cumulative regret {row['cumulative_regret_mean']:9.0f} "
                  f"(sd {row['cumulative_regret_sd']:7.0f}), slope {row['slope_mean']:.2f} "
                  f"[{row['slope_min']:.2f}, {row['slope_max']:.2f}]; stated terms sqrt(S^2AH^3T) = {sq:.0f}, "
                  f"S^2AH^3/eps = {priv:.0f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": vars(args) | {"out": str(args.out), "figure": str(args.figure)},
                                    "summary": summary, "runs": runs}, indent=1, default=str) + "\n")
    plot(runs, args, args.figure)
    print(f"wrote {args.out} and {args.figure}")


def plot(runs, args, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.envs), figsize=(5.5 * len(args.envs), 4.2), squeeze=False)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(args.epsilons)))
    for ax, e in zip(axes[0], args.envs):
        for c, eps in zip(colors, args.epsilons):
            rs = [r for r in runs if r["env"] == e and r["epsilon"] == eps]
            ks = np.array(rs[0]["checkpoints"])
            cum = np.array([r["cumulative_regret"] for r in rs])
            label = "UCB-VI (non-private)" if math.isinf(eps) else f"PUCB eps={eps:g}"
            ax.plot(ks, cum.mean(0), color=c, label=label)
            ax.fill_between(ks, cum.min(0), cum.max(0), color=c, alpha=0.2)
        ref = np.array([ks[0], ks[-1]], dtype=float)
        top = max(np.array(r["cumulative_regret"]).max() for r in runs if r["env"] == e)
        ax.plot(ref, top * ref / ref[-1], "k:", lw=1, label="slope 1 (linear)")
        ax.plot(ref, top * np.sqrt(ref / ref[-1]) / 3, "k--", lw=1, label="slope 1/2 (sqrt K)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("episodes K")
        ax.set_ylabel("cumulative regret")
        ax.set_title(f"{e} ({args.constants} constants; mean, min-max over {args.seeds} seeds)", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
