"""Tightness of the auditor on a correct Gaussian release of visit counts.

The mechanism is exactly (eps = 1, delta = 1e-5)-DP: Gaussian noise with
sigma = Delta_2 / mu, mu = the GDP parameter whose privacy profile gives
(1, 1e-5) (sigma / Delta_2 = 3.73), on visit counts n_h(s, a) of a tiny
domain (H = 3, S = 5, A = 2), with the ``rare`` canary attaining the L2
sensitivity. Prints eps_lb / eps for 1e4, 1e5, 1e6 trials per side, for the
generic test (valid for any (eps, delta) claim) and the Gaussian (GDP) test
(valid for claims from a Gaussian analysis), and the wall time of each audit.

Usage: python benchmarks/bench_audit_tightness.py [--max-trials 1000000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import polars as pl

from privaudit.audit import Claim, run_audit
from privaudit.audit.bounds import gdp_mu_from_eps
from privaudit.audit.catalogue import CatalogueMechanism
from privaudit.spec import DomainSpec

H, S, A = 3, 5, 2


def tiny_domain(n_episodes: int = 40, seed: int = 0):
    """Spec and logs: states 0..S-2 visited at every h, state S-1 never."""
    spec = DomainSpec.from_dict({
        "format_version": 1, "dataset_id": "bench-audit", "horizon": H, "n_states": S, "n_actions": A,
        "terminal_states": [], "reward_range": [0.0, 1.0], "privacy_unit": {"column": "unit_id", "max_episodes": 1}})
    rng = np.random.default_rng(seed)
    st = rng.integers(0, S - 1, size=(n_episodes, H))
    ac = rng.integers(0, A, size=(n_episodes, H))
    nxt = np.concatenate([st[:, 1:], rng.integers(0, S - 1, size=(n_episodes, 1))], axis=1)
    logs = pl.DataFrame({
        "episode_id": np.repeat(np.arange(n_episodes), H), "step": np.tile(np.arange(H), n_episodes),
        "state": st.ravel(), "action": ac.ravel(), "reward": rng.uniform(0, 1, n_episodes * H),
        "next_state": nxt.ravel(), "unit_id": np.repeat(np.arange(n_episodes), H)})
    return spec, logs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-trials", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    eps, delta = 1.0, 1e-5
    mu = gdp_mu_from_eps(eps, delta)
    spec, logs = tiny_domain()
    mech = CatalogueMechanism("gaussian", spec, rho=mu * mu / 2)
    print(f"correct Gaussian visit-count release, (eps, delta) = ({eps}, {delta}), mu = {mu:.4f}, "
          f"sigma / Delta_2 = {1 / mu:.3f}, output {H}x{S}x{A} cells, canary 'rare'")
    print(f"{'trials/side':>12} {'test':>9} {'eps_lb':>8} {'eps_lb/eps':>10} {'mu_lb/mu':>9} {'wall s':>7}")
    n = 10_000
    while n <= args.max_trials:
        for kind in ("generic", "gaussian"):
            claim = Claim.from_epsilon(eps, delta, kind=kind)
            t = time.perf_counter()
            r = run_audit(mech, logs, spec, claim=claim, trials=n, seed=args.seed, graybox=False, progress=False)
            wall = time.perf_counter() - t
            m = r.data["method"]
            lb = m["generic"]["epsilon_lower_bound"] if kind == "generic" else m["gaussian"]["epsilon_lower_bound"]
            print(f"{n:>12} {kind:>9} {lb:8.3f} {lb / eps:10.3f} {m['gaussian']['mu_lower_bound'] / mu:9.3f} "
                  f"{wall:7.1f}", flush=True)
        n *= 10


if __name__ == "__main__":
    main()
