"""Why DP-LSVI-UCB++ did not learn with the practical constants: instrumented runs (issue 16).

Runs DP-LSVI-UCB++ (and non-private LSVI-UCB++ for reference) on the
Figure-1 setting (the synthetic linear MDP of Qiao & Wang 2023, H = 20, d = 10, phi/sqrt(7),
world key 0, noise seed 1000, delta = 1e-5) and records, after each of
``--chunks`` equal chunks of users:

* regret per user in the chunk and the number of switches so far;
* Q-hat over all (h, s, a): mean, min, fraction at the clip floor 0 and at H;
* the release's scales at the chunk end, medians over (h, s, a): the bonus
  beta ||phi||_{Lambda-tilde^-1}, the standard deviation of the noise part of
  w-hat^T phi (``noise_v ||Lambda-tilde^-1 phi||_2``, exact for the fresh
  Gaussian target noise given the released Gram matrix), and their ratio;
* the log-determinants: the largest over h of log det Lambda-tilde_{k,h} -
  log det Lambda-tilde_{k-1,h} between consecutive releases (sd over the
  chunk) and how often it exceeds ln 2;
* the eigenvalues of the data part of the Gram statistic (exact; the
  experiment's view, never released) against the GOE's ~2 s sqrt(d);
* the share of (h, s) where the greedy action is optimal, resp. has the
  largest ||phi||.

Usage::

    python experiments/dp_lsvi_ucb_pp_collapse.py [--episodes 20000] [--eps 10 5 0.5] [--chunks 10]
        [--non-private] [--set noise_z=0 monotone=false switch_margin=3.8] [--tag TAG]
        [--constants practical] [--out experiments/results/dp_lsvi_ucb_pp_collapse_<tag>.json]

``--set`` overrides DP-LSVI-UCB++'s constants to measure a variant (issue 16:
``noise_z=0`` is the practical set before the fix; the committed
``..._before_K20000.json`` ran the code before it, ``..._after_K20000.json``
the code after it, both with ``--episodes 20000 --eps 10 5 0.5 --non-private``).
CPU: about 50-60 s per DP-LSVI-UCB++ run of 2 x 10^4 users.

Prints one Markdown table per run and writes all rows as JSON (format version 1).
Simulated data: the seeds are recorded.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
from dataclasses import replace
from pathlib import Path

import numpy as np

from privaudit.mdp.synthetic_linear import raw_features
from privaudit.mdp.tabular import value_iteration
from privaudit.online.env import make_env
from privaudit.online.linear.build import make_linear_agent
from privaudit.online.protocol import run_episodes
from privaudit.privacy.accounting import dp_to_zcdp

DELTA = 1e-5
PHI = raw_features() / math.sqrt(7.0)
FORMAT_VERSION = 1


def instrument(agent) -> dict:
    """Wrap ``agent._release_gram`` to keep every release's inverse and log-determinants (in place)."""
    log = {"logdet": [], "inv": None}
    release = agent._release_gram

    def wrapped():
        inv, logdet = release()
        log["logdet"].append(logdet.copy())
        log["inv"] = inv
        return inv, logdet

    agent._release_gram = wrapped
    return log


def optimal_and_max_norm(mdp, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Boolean tables (H, S, A): a is optimal at (h, s) (Q* within 1e-9 of the max); ||phi(s, a)|| is maximal."""
    _, v, _ = value_iteration(mdp)
    q = np.stack([mdp.expected_reward(h) + mdp.transition(h) @ v[h + 1] for h in range(mdp.horizon)])
    nrm = np.linalg.norm(phi, axis=-1)
    return q >= q.max(axis=-1, keepdims=True) - 1e-9, np.broadcast_to(nrm >= nrm.max(axis=-1, keepdims=True) - 1e-12,
                                                                      q.shape)


def chunk_row(agent, log: dict, regret: np.ndarray, k0: int, k1: int, tables) -> dict:
    """Statistics of users k0..k1-1 and of the agent's state after them."""
    H = agent.H
    q = agent.Qhat
    hh, ss = np.meshgrid(np.arange(H), np.arange(agent.S), indexing="ij")
    opt, big = (t[hh, ss, agent.pi] for t in tables)               # (H, S) each, for the current greedy policy
    row = {"users": [k0, k1], "regret_per_user": float(regret.mean()), "switches": int(agent.n_switches),
           "pi_optimal_frac": float(opt.mean()), "pi_max_norm_frac": float(big.mean()),
           "qhat_mean": float(q.mean()), "qhat_min": float(q.min()),
           "qhat_frac_zero": float((q <= 1e-12).mean()), "qhat_frac_H": float((q >= H - 1e-12).mean())}
    inv = log["inv"]
    phi_t = agent._phi_t                                             # (d, S*A)
    m = inv @ phi_t                                                  # (H, d, S*A)
    nphi = np.sqrt(np.maximum((m * phi_t).sum(axis=1), 0.0))        # ||phi||_{inv}
    bonus = agent._beta_opt * nphi
    noise_sd = agent.c.noise_v * np.sqrt((m * m).sum(axis=1))        # sd of phi^T inv eta, eta ~ N(0, s_v^2 I)
    # the data part of the Gram statistic (exact, seen only by this experiment) against the release's noise
    data = agent.exact_gram() - (agent.c.lam + agent.c.shift) * np.eye(agent.d)
    eig = np.linalg.eigvalsh(data)                                   # (H, d)
    row.update({"data_gram_eig_mean": float(eig.mean()), "data_gram_eig_max": float(eig.max()),
                "goe_opnorm": float(2.0 * agent.c.noise_gram * math.sqrt(agent.d))})
    row.update({"bonus_median": float(np.median(bonus)), "noise_sd_median": float(np.median(noise_sd)),
                "noise_over_bonus_median": float(np.median(noise_sd / np.maximum(bonus, 1e-300)))})
    ld = np.asarray(log["logdet"][-(k1 - k0) - 1:])                 # releases of the chunk (+ the one before)
    if len(ld) >= 2:
        step = (ld[1:] - ld[:-1]).max(axis=1)
        row.update({"logdet_step_max_h_mean": float(step.mean()), "logdet_step_max_h_sd": float(step.std()),
                    "frac_step_ge_ln2": float((step >= math.log(2.0)).mean()),
                    "logdet_mean": float(ld.mean())})
    del log["logdet"][:-1]
    return row


def run(algo: str, eps: float | None, K: int, chunks: int, constants: str, seed: int = 0,
        overrides: dict | None = None) -> dict:
    """One instrumented run; returns its record (rows per chunk, CPU seconds)."""
    env = make_env("synthetic-linear", world_key=seed)
    reward = np.stack([env.mdp.expected_reward(h) for h in range(env.horizon)])
    rho = math.inf if eps is None else dp_to_zcdp(eps, DELTA)
    agent = make_linear_agent(algo, PHI, reward, env.horizon, K, rho=rho, delta=DELTA, constants=constants,
                              rng=np.random.default_rng(1000 + seed))
    if overrides:
        agent.c = replace(agent.c, **overrides)
    log = instrument(agent)
    tables = optimal_and_max_norm(env.mdp, PHI)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    rows = []
    bounds = np.linspace(0, K, chunks + 1).round().astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):
        reg = run_episodes(env, agent, int(b - a), first_user=int(a)).regret
        rows.append(chunk_row(agent, log, reg, int(a), int(b), tables))
        print(json.dumps(rows[-1]), flush=True)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    c = agent.c
    return {"algo": algo, "epsilon": eps, "episodes": K, "constants": constants, "seed": seed,
            "world_key": seed, "noise_seed": 1000 + seed, "cpu_seconds": cpu,
            "noise_gram": c.noise_gram, "noise_v": c.noise_v, "beta_opt": agent._beta_opt,
            "shift": c.shift, "floor": c.floor, "switch_margin": c.switch_margin, "monotone": c.monotone,
            "noise_z": c.noise_z, "overrides": overrides or {}, "switches": int(agent.n_switches), "rows": rows}


def table(rec: dict) -> str:
    """Markdown table of one run's chunks."""
    head = ("| users | regret/user | switches | pi optimal | pi max-norm | Q-hat mean | Q-hat min | frac Q=0 | frac Q=H | bonus | "
            "noise sd (w^T phi) | noise/bonus | max_h dlogdet mean (sd) | P(dlogdet >= ln 2) |")
    out = [f"{rec['algo']} eps={rec['epsilon']} K={rec['episodes']} {rec['constants']}: "
           f"CPU {rec['cpu_seconds']:.0f} s, GOE s={rec['noise_gram']:.3g}, noise_v={rec['noise_v']:.3g}, "
           f"beta={rec['beta_opt']:.3g}, shift={rec['shift']:.3g}, switch margin={rec['switch_margin']:.3g}, "
           f"monotone={rec['monotone']}, noise_z={rec['noise_z']:.3g}", "", head, "|" + "---|" * 14]
    for r in rec["rows"]:
        out.append(f"| {r['users'][0]:,}-{r['users'][1]:,} | {r['regret_per_user']:.3f} | {r['switches']:,} | "
                   f"{r['pi_optimal_frac']:.2f} | {r['pi_max_norm_frac']:.2f} | {r['qhat_mean']:.2f} | {r['qhat_min']:.2f} | {r['qhat_frac_zero']:.3f} | "
                   f"{r['qhat_frac_H']:.3f} | {r['bonus_median']:.3g} | {r['noise_sd_median']:.3g} | "
                   f"{r['noise_over_bonus_median']:.3g} | {r.get('logdet_step_max_h_mean', float('nan')):.3f} "
                   f"({r.get('logdet_step_max_h_sd', float('nan')):.3f}) | {r.get('frac_step_ge_ln2', float('nan')):.3f} |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--eps", type=float, nargs="+", default=[10.0, 0.5])
    ap.add_argument("--chunks", type=int, default=10)
    ap.add_argument("--constants", choices=["practical", "theory"], default="practical")
    ap.add_argument("--non-private", action="store_true", help="also run LSVI-UCB++")
    ap.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                    help="override DP-LSVI-UCB++ constants (switch_margin, monotone, noise_z) for a variant")
    ap.add_argument("--tag", default="run")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, _, val = item.partition("=")
        overrides[key] = (val.lower() == "true") if key == "monotone" else float(val)
    recs = []
    jobs = ([("lsvi-ucb-pp", None)] if args.non_private else []) + [("dp-lsvi-ucb-pp", e) for e in args.eps]
    for algo, eps in jobs:
        rec = run(algo, eps, args.episodes, args.chunks, args.constants,
                  overrides=overrides if algo == "dp-lsvi-ucb-pp" else None)
        recs.append(rec)
        print(table(rec), flush=True)
    out = Path(args.out or Path(__file__).resolve().parent / "results" / f"dp_lsvi_ucb_pp_collapse_{args.tag}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"format_version": FORMAT_VERSION, "experiment": "dp_lsvi_ucb_pp_collapse",
                               "delta": DELTA, "runs": recs}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
