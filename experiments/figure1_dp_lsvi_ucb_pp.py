"""Reproduce seed 003's Figure 1: cumulative regret of the linear explorers on the synthetic linear MDP.

(a) LSVI-UCB, Luyo et al., Ngo et al., LSVI-UCB++ and DP-LSVI-UCB++ at one
budget (eps = 5, delta = 1e-5, converted to rho exactly); (b) DP-LSVI-UCB++ at
eps in {0.5, 1, 2, 5, 10} (delta = 1e-5) against LSVI-UCB++. The seed's MDP
(seed 000 Appendix 13, instance seed 0, H = 20) with phi scaled by 1/sqrt(7)
(||phi|| <= 1, as issue 16 asks); users are the project's response trees
(``privaudit.online.env``), run r uses world key r (fresh users) and agent
noise seed 1000 + r. Mean and standard error over the runs.

The seed's figure has no readable numbers and does not state K, the budget
of panel (a) or its constants; the claims to check are "DP-LSVI-UCB++ beats
Ngo and Luyo and even non-private LSVI-UCB, and approaches LSVI-UCB++ as the
budget grows" (seed 003 l.275).

Usage::

    python experiments/figure1_dp_lsvi_ucb_pp.py [--episodes 5000] [--runs 3] [--constants practical]
        [--panels a b] [--workers 2] [--out-dir docs/img] [--json experiments/results/figure1_<constants>.json]

Prints a Markdown table of the final cumulative regret and writes the PNGs and JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from privaudit.mdp.synthetic_linear import raw_features
from privaudit.online.env import make_env
from privaudit.online.linear.registry import LINEAR_ALGOS, make_linear_agent
from privaudit.online.protocol import run_episodes
from privaudit.privacy.accounting import dp_to_zcdp

EPS_PANEL_A = 5.0
EPS_PANEL_B = (0.5, 1.0, 2.0, 5.0, 10.0)
DELTA = 1e-5
PHI = raw_features() / math.sqrt(7.0)
LABELS = {"lsvi-ucb": "LSVI-UCB", "luyo": "Luyo et al.", "ngo": "Ngo et al.", "lsvi-ucb-pp": "LSVI-UCB++",
          "dp-lsvi-ucb-pp": "DP-LSVI-UCB++"}


def checkpoints(K: int) -> np.ndarray:
    """About 60 log-spaced episode counts 1..K where the cumulative regret is kept."""
    return np.unique(np.round(np.logspace(0, math.log10(K), 60)).astype(int))


def one_run(job: tuple) -> tuple:
    """(key, run, cumulative regret at the checkpoints, switches, seconds) of one run."""
    algo, eps, run, K, constants = job
    env = make_env("synthetic-linear", world_key=run)
    reward = np.stack([env.mdp.expected_reward(h) for h in range(env.horizon)])
    rho = dp_to_zcdp(eps, DELTA) if (LINEAR_ALGOS[algo] and eps is not None) else math.inf
    agent = make_linear_agent(algo, PHI, reward, env.horizon, K, rho=rho, delta=DELTA, constants=constants,
                              rng=np.random.default_rng(1000 + run))
    t0 = time.perf_counter()
    cum = np.cumsum(run_episodes(env, agent, K).regret)
    return (algo, eps, run, cum[checkpoints(K) - 1].tolist(), agent.n_switches, time.perf_counter() - t0)


def run(K: int, runs: int, constants: str, panels, workers: int) -> dict:
    """All runs of the requested panels; returns a JSON-ready dict."""
    keys = []
    if "a" in panels:
        keys += [(a, EPS_PANEL_A if LINEAR_ALGOS[a] else None) for a in LABELS]
    if "b" in panels:
        keys += [("dp-lsvi-ucb-pp", e) for e in EPS_PANEL_B] + [("lsvi-ucb-pp", None)]
    keys = list(dict.fromkeys(keys))
    jobs = [(a, e, r, K, constants) for a, e in keys for r in range(runs)]
    out = {}
    with ProcessPoolExecutor(max_workers=workers) as ex:
        for algo, eps, r, cum, sw, sec in ex.map(one_run, jobs):
            name = algo if eps is None else f"{algo} eps={eps:g}"
            d = out.setdefault(name, {"algo": algo, "epsilon": eps, "cum": [], "switches": [], "seconds": []})
            d["cum"].append(cum)
            d["switches"].append(sw)
            d["seconds"].append(sec)
            print(f"  {name} run {r}: regret {cum[-1]:.0f}, switches {sw}, {sec:.0f} s", flush=True)
    for d in out.values():
        c = np.asarray(d["cum"])
        d["mean"] = c.mean(axis=0).tolist()
        d["se"] = (c.std(axis=0, ddof=1) / math.sqrt(len(c))).tolist() if len(c) > 1 else [0.0] * c.shape[1]
    return {"episodes": K, "runs": runs, "constants": constants, "delta": DELTA,
            "rho_of_eps": {str(e): dp_to_zcdp(e, DELTA) for e in sorted({EPS_PANEL_A, *EPS_PANEL_B})},
            "checkpoints": checkpoints(K).tolist(), "curves": out}


def plot(res: dict, out_dir: Path) -> list[Path]:
    """One PNG per panel; returns the paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.asarray(res["checkpoints"])
    tag = res["constants"]
    paths = []
    panels = {"a": [k for k in res["curves"] if k in LABELS or k.endswith(f"eps={EPS_PANEL_A:g}")],
              "b": ["lsvi-ucb-pp"] + sorted((k for k in res["curves"] if k.startswith("dp-lsvi-ucb-pp eps=")),
                                            key=lambda k: res["curves"][k]["epsilon"])}
    panels["b"] = [k for k in panels["b"] if k in res["curves"]]
    for panel, names in panels.items():
        if not names or (panel == "b" and len(names) < 3):
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for name in names:
            d = res["curves"][name]
            m, se = np.asarray(d["mean"]), np.asarray(d["se"])
            label = LABELS[d["algo"]] + (f" (eps={d['epsilon']:g})" if d["epsilon"] is not None else "")
            ax.plot(x, m, lw=1.5, label=label)
            ax.fill_between(x, m - se, m + se, alpha=0.2)
        ax.set_xlabel("episode K (users)")
        ax.set_ylabel("cumulative regret")
        title = ("(a) algorithms, eps = %g, delta = 1e-5" % EPS_PANEL_A if panel == "a"
                 else "(b) DP-LSVI-UCB++ budgets, delta = 1e-5")
        ax.set_title(f"{title}; H = 20, {tag} constants, {res['runs']} runs", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = out_dir / f"figure1{panel}_{tag}.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        paths.append(p)
    return paths


def table(res: dict) -> str:
    """Markdown table: final cumulative regret (mean +- se), switches, seconds per run."""
    K = res["episodes"]
    rows = [f"| algorithm | cumulative regret at K = {K} | mean switches | s / run |", "|---|---|---|---|"]
    for name, d in res["curves"].items():
        rows.append(f"| {name} | {d['mean'][-1]:.0f} +- {d['se'][-1]:.0f} | {np.mean(d['switches']):.0f} | "
                    f"{np.mean(d['seconds']):.0f} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--constants", choices=["practical", "theory"], default="practical")
    ap.add_argument("--panels", nargs="+", default=["a", "b"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out-dir", default="docs/img")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    res = run(args.episodes, args.runs, args.constants, args.panels, args.workers)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for p in plot(res, out_dir):
        print(f"wrote {p}")
    js = Path(args.json or f"experiments/results/figure1_{args.constants}.json")
    js.parent.mkdir(parents=True, exist_ok=True)
    js.write_text(json.dumps(res, indent=1) + "\n")
    print(table(res))


if __name__ == "__main__":
    main()
