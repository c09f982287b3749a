"""Ngo et al.'s explorer: the paper's noisy determinant test against the public switching schedule (issue 31, D2).

For each setting (H, eps, K) on the synthetic linear MDP (phi / sqrt(7), world key = seed, noise seed
1000 + seed, delta = 1e-5, practical constants, the paper's information: rewards regressed, not given)
and both switching rules (``ngo_constants(..., switching=...)``), and the paper's test without noise
(``no noise``: rho = inf, exact Gram matrices, for the switch count the data alone cause), prints the number of switches, the
episode of the last one (a policy frozen by the cap stops there), the public cap or schedule length,
and the regret per user over the first and the last 10% of the users and in total.

Usage::

    python experiments/ngo_public_schedule.py [--seeds 0 1 2] [--settings 5:1:10000 20:5:20000]
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from privaudit.mdp.synthetic_linear import raw_features  # noqa: E402
from privaudit.online.env import make_env  # noqa: E402
from privaudit.online.linear.constants import Problem, ngo_constants  # noqa: E402
from privaudit.online.linear.ngo import NgoLSVIUCB  # noqa: E402
from privaudit.online.protocol import run_episodes  # noqa: E402
from privaudit.privacy.accounting import dp_to_zcdp  # noqa: E402

PHI = raw_features() / math.sqrt(7.0)
DELTA = 1e-5


def one(horizon: int, eps: float, K: int, switching: str, seed: int) -> dict:
    """One run; the switch episodes are recorded by wrapping the agent's policy update."""
    env = make_env("synthetic-linear", horizon=horizon, world_key=seed)
    S, A, d = PHI.shape
    rho = math.inf if switching == "no noise" else dp_to_zcdp(eps, DELTA)
    c = ngo_constants(Problem(horizon, S, A, d, K), rho, "practical",
                      switching="determinant" if switching == "no noise" else switching)
    agent = NgoLSVIUCB(PHI, horizon, K, c, rng=np.random.default_rng(1000 + seed))
    seen, update = [], agent._switch

    def recorded(inv):
        seen.append(agent.k)
        update(inv)
    agent._switch = recorded
    t = time.process_time()
    reg = run_episodes(env, agent, K).regret
    tenth = K // 10
    return {"switches": len(seen), "last": seen[-1] if seen else 0, "cap": c.n_max, "first": reg[:tenth].mean(),
            "final": reg[-tenth:].mean(), "total": reg.sum(), "cpu": time.process_time() - t}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--settings", nargs="+", default=["5:1:10000", "20:5:20000"], help="H:eps:K")
    args = ap.parse_args(argv)
    print("| H | eps | K | switching | seed | switches (cap / schedule) | last switch | per user, first 10% "
          "| per user, last 10% | cumulative | CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for setting in args.settings:
        h, e, k = setting.split(":")
        for switching in ("no noise", "determinant", "schedule"):
            for seed in args.seeds:
                r = one(int(h), float(e), int(k), switching, seed)
                print(f"| {h} | {e} | {int(k):,} | {switching} | {seed} | {r['switches']} ({r['cap']}) | "
                      f"{r['last']:,} | {r['first']:.3f} | {r['final']:.3f} | {r['total']:,.0f} | {r['cpu']:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
