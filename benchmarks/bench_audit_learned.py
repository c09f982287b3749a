"""Does the learned attack change the auditor's verdicts on the testing literature's families? (issue 30, item 1)

Audits, with and without the learned candidate (``privaudit.audit.learned``), three broken
mechanisms of the DP-testing literature on the StatDP input patterns (Ding et al. 2018: D = (1, 1, 1, 1, 1)
and D' one query above / below, one above and the rest below, one below and the rest above, half and half,
all above, all below; and the "x", (1, 1, 0, 0, 0) vs (0, 0, 1, 1, 1)), each query moved by at most 1:

* report-noisy-max that also returns its noisy value (Laplace noise of scale 2/eps);
* the sparse vector technique without cutoff, query noise Lap(2/eps) (Lyu, Su & Li 2017, Algorithm 6);
* the sparse vector technique with too little query noise, Lap(1/eps2), eps2 = 3 eps / 4, c = 1
  (Lyu, Su & Li 2017, Algorithm 4).

Prints one line per audit: family, pattern, verdict and eps_lb without and with the learned attack, the
candidate chosen with it, and CPU seconds of the audit with it.

Usage: python benchmarks/bench_audit_learned.py [--trials 1000000] [--epsilon 0.1] [--seed 3]
"""

from __future__ import annotations

import argparse
import functools
import time
from unittest import mock

import numpy as np

from literature.suite import statdp_patterns

from privaudit.audit import AuditSettings, Claim, input_pair, run_audit

#: The StatDP input patterns for 5 queries, name -> (D, D'), as the literature suite defines them (its
#: ``x_shape`` is StatDP's X pattern, (1, 1, 0, 0, 0) vs (0, 0, 1, 1, 1); an earlier version of this script
#: audited (1, ..., 1) vs (0, 0, 2, 2, 2) under that name).
PATTERNS = statdp_patterns(5)


def noisy_max_with_value(q, rng, n_runs=1, eps=0.1):
    """Report-noisy-max returning (index, noisy value): not eps-DP."""
    y = np.asarray(q, dtype=float) + rng.laplace(0.0, 2 / eps, (n_runs, len(q)))
    i = y.argmax(axis=1)
    return np.stack([i, y[np.arange(n_runs), i]], axis=1)


def svt_no_cutoff(q, rng, n_runs=1, eps=0.1):
    """Lyu, Su & Li 2017, Algorithm 6: every answer released, query noise Lap(2/eps)."""
    q = np.asarray(q, dtype=float)
    rho = rng.laplace(0.0, 2 / eps, (n_runs, 1))
    return (q + rng.laplace(0.0, 2 / eps, (n_runs, q.size)) >= rho).astype(float)


def svt_small_query_noise(q, rng, n_runs=1, eps=0.1):
    """Lyu, Su & Li 2017, Algorithm 4 (c = 1): threshold noise Lap(4/eps), query noise Lap(4/(3 eps))."""
    q = np.asarray(q, dtype=float)
    rho = rng.laplace(0.0, 4 / eps, (n_runs, 1))
    above = q + rng.laplace(0.0, 4 / (3 * eps), (n_runs, q.size)) >= rho
    before = np.cumsum(above, axis=1) - above
    return (above & (before < 1)).astype(float)


FAMILIES = {"noisy_max_with_value": noisy_max_with_value, "svt_alg6": svt_no_cutoff,
            "svt_alg4": svt_small_query_noise}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1_000_000)
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args()
    claim = Claim.from_epsilon(a.epsilon, 0.0)
    settings = AuditSettings(graybox=False, n_jobs=1)
    changed = 0
    for fam, fn in FAMILIES.items():
        mech = functools.partial(fn, eps=a.epsilon)
        mech.__name__ = fam
        for name, (d, dp) in PATTERNS.items():
            pair = input_pair(d, dp)
            with mock.patch("privaudit.audit.runner.learned_candidates", lambda X0, X1: []):
                off = run_audit(mech, pair=pair, claim=claim, trials=a.trials, seed=a.seed, settings=settings)
            t = time.process_time()
            on = run_audit(mech, pair=pair, claim=claim, trials=a.trials, seed=a.seed, settings=settings)
            cpu = time.process_time() - t
            changed += off.verdict != on.verdict
            print(f"{fam:22s} {name:22s} without: {off.verdict:18s} {off.epsilon_lower_bound:6.3f}  "
                  f"with: {on.verdict:18s} {on.epsilon_lower_bound:6.3f} ({on.data['chosen_event']['candidate']}) "
                  f"{cpu:5.1f} s CPU", flush=True)
    print(f"verdicts changed by the learned attack: {changed} of {len(FAMILIES) * len(PATTERNS)}")


if __name__ == "__main__":
    main()
