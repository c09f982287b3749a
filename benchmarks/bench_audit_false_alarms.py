"""False-alarm study of the auditor (issue 14, "What it must show").

Audits correct mechanisms at their true claims, 50 seeds x 1e5 runs per side,
and counts violations (each audit is wrong with probability at most
1 - confidence = 0.05 when a mechanism sits exactly at its claim; correct
mechanisms sit below theirs, so 0 is expected):

* the catalogue's correct mechanisms (``privaudit.audit.mechanisms.catalogue.CORRECT``,
  tiny domain H = 3, S = 5, A = 2, ``rare`` canary): rounded Gaussian and
  Laplace, snapped float Gaussian reward sums, the exact discrete Gaussian
  (claimed as rho, generic test) and discrete Laplace;
* the claim-kind mechanisms (``CLAIM_KIND``): the discrete Gaussian
  N_Z(0, 1) claimed as rho = 0.5, randomized response at epsilon 1 claimed as
  rho = 0.5, rounded Laplace at epsilon 0.5 claimed as rho = 0.125, with the
  default (generic) test.

Prints per mechanism: the claim's test, alarms / audits, the largest eps_lb /
claimed eps and mu_lb / claimed mu (GDP opt-in only), seconds per audit.

Usage: python benchmarks/bench_audit_false_alarms.py [--seeds 50] [--trials 100000] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import polars as pl

from privaudit.audit import AuditSettings, run_audit
from privaudit.audit.mechanisms.catalogue import CLAIM_KIND, CORRECT, CatalogueMechanism, ClaimKindMechanism, scalar_pair
from privaudit.core.spec import DomainSpec

H, S, A = 3, 5, 2


def tiny_domain(n_episodes: int = 40, seed: int = 0):
    """The audit tests' tiny domain (tests/audit/helpers.py): every (h, s < S-1, a) visited."""
    spec = DomainSpec.from_dict({
        "format_version": 1, "dataset_id": "audit-tiny", "horizon": H, "n_states": S, "n_actions": A,
        "terminal_states": [], "reward_range": [0.0, 1.0], "privacy_unit": {"column": "unit_id", "max_episodes": 1}})
    rng = np.random.default_rng(seed)
    states = rng.integers(0, S - 1, size=(n_episodes, H))
    actions = rng.integers(0, A, size=(n_episodes, H))
    cells = np.array([(s, a) for s in range(S - 1) for a in range(A)])
    for h in range(H):
        states[: len(cells), h], actions[: len(cells), h] = cells[:, 0], cells[:, 1]
    nxt = np.concatenate([states[:, 1:], rng.integers(0, S - 1, size=(n_episodes, 1))], axis=1)
    logs = pl.DataFrame({
        "episode_id": np.repeat(np.arange(n_episodes), H), "step": np.tile(np.arange(H), n_episodes).astype(np.int32),
        "state": states.ravel().astype(np.int32), "action": actions.ravel().astype(np.int32),
        "reward": np.round(rng.uniform(0, 1, n_episodes * H), 3), "next_state": nxt.ravel().astype(np.int32),
        "unit_id": np.repeat(np.arange(n_episodes), H)})
    return spec, logs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    spec, logs = tiny_domain()
    rows = [(n, "claim-kind") for n in CLAIM_KIND] + [(n, "catalogue") for n in CORRECT]
    if args.only:
        rows = [r for r in rows if r[0] in args.only]
    print(f"{args.seeds} seeds x {args.trials} runs per side, confidence 0.95")
    print(f"{'mechanism':<26} {'test':<9} {'alarms':>8} {'max eps_lb/eps':>15} {'max mu_lb/mu':>13} {'s/audit':>8}")
    for name, kind in rows:
        if kind == "catalogue":
            m = CatalogueMechanism(name, spec)
            audit = dict(logs=logs, spec=spec)
        else:
            m = ClaimKindMechanism(name)
            audit = dict(pair=scalar_pair())
        claim = m.claim()
        alarms, worst_eps, worst_mu = 0, 0.0, 0.0
        t = time.perf_counter()
        for seed in range(args.seeds):
            r = run_audit(m, **audit, claim=claim, trials=args.trials, seed=seed, settings=AuditSettings(graybox=False), progress=False)
            alarms += r.violation
            worst_eps = max(worst_eps, r.epsilon_lower_bound / claim.epsilon)
            if claim.kind == "gaussian":
                worst_mu = max(worst_mu, r.data["method"]["gaussian"]["mu_lower_bound"] / claim.mu)
        wall = (time.perf_counter() - t) / args.seeds
        mu = f"{worst_mu:13.3f}" if claim.kind == "gaussian" else f"{'-':>13}"
        print(f"{name:<26} {claim.kind:<9} {alarms:>4}/{args.seeds:<3} {worst_eps:15.3f} {mu} {wall:8.1f}", flush=True)


if __name__ == "__main__":
    main()
