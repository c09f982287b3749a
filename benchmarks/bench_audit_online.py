"""How close an audit of a *correct* online explorer gets to its joint-DP claim, and the broken ones' verdicts.

For each correct explorer (PUCB at eps = 1; Luyo, Ngo, DP-LSVI-UCB++ at
rho = 0.1, i.e. mu = sqrt(2 rho) = 0.447 and eps = 1.914 at delta = 1e-5) it
runs the gray-box audit (``billboard`` view: by default the projection on user
k's known change with design-fixed thresholds, every run evaluated;
``--selection`` for the selection-split choice) and the black-box audit
(``actions`` view, selection split) at ``--trials`` runs per side and prints
the certified lower bound as a fraction of the claim: eps for PUCB (Laplace
likelihood-ratio events, generic pure-eps test); mu for the Gaussian
explorers (the GDP test, valid for their exact discrete Gaussian lattice noise
through the total-variation route, ``ExplorerMechanism.gaussian_tv_per_run``),
with the same event's generic (eps, delta) bound, the resolution limit and
the CPU time (also per run). Then every broken catalogue explorer at its
stated budget. One JSON line per audit goes to
``benchmarks/results/audit_online.jsonl``.

Run (background, low priority; PYTHONPATH so that a worktree's package is used):

    PYTHONPATH=. nice -n 10 python benchmarks/bench_audit_online.py --only correct --trials 20000 > /tmp/bench_online.txt 2>&1 &

Worlds: riverswim H = 2, S = 2 (+ 4 scripted states), A = 2, K = 4 users,
canary k = 0, m = 3 silent users after her (linear explorers); PUCB on
H = 1, K = 1 (its tight setting: user k's leaf is in one node per family).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

from privaudit.audit.claim import Claim
from privaudit.audit.online.jdp import ExplorerMechanism
from privaudit.audit.online.catalogue import BROKEN, CATALOGUE, audit_entry, audit_explorer, entry_claim
from privaudit.audit.online.streams import make_world_pair
from privaudit.online.env import make_env

OUT = Path(__file__).resolve().parent / "results" / "audit_online.jsonl"


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def record(row: dict) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


def correct(algo: str, view: str, trials: int, seed: int, fixed: bool = False) -> dict:
    """One audit of a correct explorer at its claim.

    Linear explorers: the GDP test (claim kind gaussian), valid for their exact discrete Gaussian noise
    through the total-variation route (``ExplorerMechanism.gaussian_tv_per_run``: the runner spends
    2 n tv of alpha); the chosen event's generic (eps, delta) bound is reported too. PUCB: the generic
    pure-eps test. ``fixed``: the billboard's projection on user k's known change with thresholds fixed
    from the public design, no selection split (all runs evaluated).
    """
    if algo == "pucb":
        env = make_env("riverswim", horizon=1, states=2)
        d, dp, desc = make_world_pair(env, canary_user=0, n_after=0 if view == "billboard" else 3,
                                      n_episodes=1 if view == "billboard" else 4)
        mech, claim = ExplorerMechanism("pucb", epsilon=1.0, view=view), Claim.from_epsilon(1.0, 0.0)
    else:
        env = make_env("riverswim", horizon=2, states=2)
        d, dp, desc = make_world_pair(env, canary_user=0, n_after=3, n_episodes=4)
        mech = ExplorerMechanism(algo, rho=0.1, view=view)
        claim = Claim.from_rho(0.1, 1e-5, kind="gaussian")
    t0, c0 = time.time(), cpu()
    rep = audit_explorer(mech, d, dp, desc, claim=claim, trials=trials, seed=seed, fixed=fixed)
    cpu_s = cpu() - c0
    data = rep.data
    g = data["method"]["gaussian"]
    ev = data["chosen_event"]
    return {"explorer": algo, "view": view, "event_choice": "fixed (public design)" if fixed else "selection split",
            "test": "generic (pure eps)" if algo == "pucb" else "gdp (lattice TV route)",
            "trials": trials, "evaluation_trials": data["evaluation_trials"], "verdict": rep.verdict,
            "claimed_epsilon": claim.epsilon, "claimed_mu": claim.mu,
            "epsilon_lower_bound": rep.epsilon_lower_bound,
            "epsilon_fraction": (rep.epsilon_lower_bound or 0.0) / claim.epsilon,
            "generic_epsilon_lower_bound": data["method"]["generic"]["epsilon_lower_bound"],
            "mu_lower_bound": g["mu_lower_bound"] if claim.mu else None,
            "mu_fraction": g["mu_lower_bound"] / claim.mu if claim.mu else None,
            "event": ev["candidate"] + " " + ev["event"], "counts": ev["counts"],
            "resolution": data["resolution_limit"], "cpu_s": cpu_s, "cpu_ms_per_run": 1000 * cpu_s / (2 * trials),
            "wall_s": time.time() - t0, "seed": seed}


def broken(name: str, seed: int) -> dict:
    t0, c0 = time.time(), cpu()
    rep = audit_entry(name, seed=seed)
    return {"explorer": name, "view": CATALOGUE[name].view, "trials": CATALOGUE[name].trials, "verdict": rep.verdict,
            "exit_code": rep.exit_code, "claimed_epsilon": entry_claim(CATALOGUE[name]).epsilon,
            "epsilon_lower_bound": rep.epsilon_lower_bound, "event": (rep.data["chosen_event"] or {}).get("candidate", "gray-box range check"),
            "resolution": rep.data["resolution_limit"], "cpu_s": cpu() - c0, "wall_s": time.time() - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20_000)
    ap.add_argument("--pucb-trials", type=int, default=20_000, help="PUCB's billboard audit (pure eps needs more)")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--only", default=None, help="comma-separated: correct, broken, or explorer names")
    ap.add_argument("--views", default="billboard,actions", help="comma-separated views to run")
    ap.add_argument("--selection", action="store_true",
                    help="billboard: choose the event on a selection split instead of the fixed projection")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    for algo in ("ngo", "luyo", "dp-lsvi-ucb-pp", "pucb"):
        if only and not ({"correct", algo} & only):
            continue
        for view in a.views.split(","):
            n = a.pucb_trials if (algo == "pucb" and view == "billboard") else a.trials
            record(correct(algo, view, n, a.seed, fixed=view == "billboard" and not a.selection))
    for name in BROKEN:
        if only and not ({"broken", name} & only):
            continue
        record(broken(name, a.seed))


if __name__ == "__main__":
    main()
