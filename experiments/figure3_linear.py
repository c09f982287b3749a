"""Reproduce Qiao & Wang (2023) Figure 3: sub-optimality v* - v^pi against K on the synthetic linear MDP.

(a) PEVI, VAPVI and DP-VAPVI (rho = 5, with and without the (E/2) I shift); (b) DP-VAPVI at rho in {1, 5, 25, 100}
with VAPVI for reference. H = 20, instance seed 0, 5 runs per point (each run a
fresh dataset from the paper's behaviour policy, shared by all learners of that
run, and fresh DP noise); no D/D' split, as in the paper.

Constants (this project's choice, docs/linear.md; the paper does not report its own): C = 1,
lambda = 1, d_scale = 0 (no D/K term), delta_fail = 0.05, c1 = c2 = 1. PEVI
uses beta = sqrt(d) (the same multiplier as VAPVI's C sqrt(d)): with its
theoretical beta = d H sqrt(log(2dHK/xi)) its Q is 0 everywhere for every K
here and it keeps the behaviour's mode a = 0 (gap 10.24).

Usage::

    python experiments/figure3_linear.py [--runs 5] [--out-dir docs/img] [--json experiments/results/figure3_linear.json]

Outputs two PNGs and prints a Markdown table (mean +- standard error).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from privaudit.learners.linear import DPVAPVI, PEVI, VAPVI, LinearData
from privaudit.mdp.simulate import simulate
from privaudit.mdp.synthetic_linear import behaviour_policy, synthetic_linear_features, synthetic_linear_mdp
from privaudit.mdp.tabular import evaluate_policy, value_iteration

K_GRID = (5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 100_000)
RHOS = (1.0, 5.0, 25.0, 100.0)
RHO_PANEL_A = 5.0


def run(runs: int = 5, k_grid=K_GRID, rhos=RHOS, seed: int = 2023, instance_seed: int = 0) -> dict:
    """Sub-optimality gaps, shape (runs,) per (learner, K); returns a JSON-ready dict."""
    mdp = synthetic_linear_mdp(instance_seed)
    fmap = synthetic_linear_features()
    _, _, vstar = value_iteration(mdp)
    pi_b = behaviour_policy()
    learners = {"PEVI": lambda: PEVI(beta=np.sqrt(fmap.dim)), "PEVI (theory beta)": PEVI, "VAPVI": VAPVI}
    learners.update({f"DP-VAPVI rho={r:g}": (lambda r=r: DPVAPVI(r)) for r in rhos})
    # diagnostic: the same noise without the data-independent (E/2) I shift (still rho-zCDP)
    learners[f"DP-VAPVI rho={RHO_PANEL_A:g} no shift"] = lambda: DPVAPVI(RHO_PANEL_A, shift=0.0)
    gaps = {name: {K: [] for K in k_grid} for name in learners}
    root = np.random.default_rng(seed)
    for K in k_grid:
        for rng in root.spawn(runs):
            data_rng, noise_rng = rng.spawn(2)
            df = simulate(mdp, pi_b, K, data_rng)
            data = LinearData.from_rows(df["step"], df["state"], df["action"], df["reward"], df["next_state"],
                                        np.zeros(df.height, bool), H=mdp.horizon, S=2, A=100, n_episodes=K)
            for name, make in learners.items():
                est = make().fit(data, fmap, rng=noise_rng)  # the non-private learners ignore rng
                gaps[name][K].append(float(vstar - evaluate_policy(mdp, est.table_)))
    return {"v_star": vstar, "v_behaviour": evaluate_policy(mdp, pi_b), "runs": runs, "k_grid": list(k_grid),
            "instance_seed": instance_seed, "seed": seed, "gaps": {n: {str(k): g for k, g in d.items()}
                                                                      for n, d in gaps.items()}}


def markdown_table(res: dict) -> str:
    names = list(res["gaps"])
    lines = ["| K | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for K in res["k_grid"]:
        cells = []
        for n in names:
            g = np.array(res["gaps"][n][str(K)])
            cells.append(f"{g.mean():.3f} ± {g.std(ddof=1) / np.sqrt(len(g)):.3f}")
        lines.append(f"| {K} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(res: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    K = np.array(res["k_grid"])
    panels = {"a": ["PEVI", "PEVI (theory beta)", "VAPVI", f"DP-VAPVI rho={RHO_PANEL_A:g}",
                    f"DP-VAPVI rho={RHO_PANEL_A:g} no shift"],
              "b": ["VAPVI"] + [n for n in res["gaps"] if n.startswith("DP-VAPVI") and "shift" not in n]}
    titles = {"a": "(a) PEVI, VAPVI, DP-VAPVI", "b": "(b) DP-VAPVI at several rho (zCDP)"}
    paths = []
    for key, names in panels.items():
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for n in names:
            g = np.array([res["gaps"][n][str(k)] for k in K])
            m, se = g.mean(1), g.std(1, ddof=1) / np.sqrt(g.shape[1])
            ax.errorbar(K, m, yerr=se, marker="o", ms=3, capsize=2, label=n)
        ax.set_xscale("log")
        ax.set_xlabel("number of episodes K")
        ax.set_ylabel("sub-optimality v* - v^pi")
        ax.set_title(titles[key] + f", H=20, {res['runs']} runs")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        p = out_dir / f"figure3_linear_{key}.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        paths.append(p)
    return paths


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out-dir", type=Path, default=Path("docs/img"))
    ap.add_argument("--json", type=Path, default=Path("experiments/results/figure3_linear.json"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = run(args.runs)
    res["wall_seconds"] = time.perf_counter() - t0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=1) + "\n")
    for p in plot(res, args.out_dir):
        print(f"wrote {p}")
    print(f"v* = {res['v_star']:.4f}, v(behaviour) = {res['v_behaviour']:.4f}, {res['wall_seconds']:.1f} s")
    print(markdown_table(res))


if __name__ == "__main__":
    main()
