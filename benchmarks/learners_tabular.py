"""Speed of the tabular learners on ICU-Sepsis-shaped data (S = 716, A = 25, H = 20).

Run::

    /tmp/venv/bin/python benchmarks/learners_tabular.py [--episodes 100000]

Prints wall seconds for: exact counts from a simulated clinicians' log, VE,
APVI and DP-APVI (per-step and stationary). DP-APVI here gets *fully* noised
counts (every one of the H*S*A*S transition cells, as a release holds them,
rho = 1, exact discrete Gaussian noise as the release draws it), and projects every row with noisy visit count > E/2.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from privaudit.learners.tabular.apvi import APVI
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.tabular.counts import TabularCounts, exact_counts
from privaudit.learners.tabular.ve import ValueIterationCE
from privaudit.mdp.icu_sepsis import clinicians_policy, icu_sepsis_spec_doc, load_icu_sepsis
from privaudit.mdp.simulate import simulate
from privaudit.privacy.mechanisms import add_noise, noise_bound
from privaudit.core.spec import DomainSpec


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    mdp = load_icu_sepsis()
    spec = DomainSpec.from_dict(icu_sepsis_spec_doc())
    reward, term = spec.public_reward_vector(), spec.terminal_states
    rng = np.random.default_rng(args.seed)
    log = simulate(mdp, clinicians_policy(), args.episodes, rng)
    print(f"ICU-Sepsis S={spec.S} A={spec.A} H={spec.H}, {args.episodes} episodes ({log.height} steps)")
    for stationary in (False, True):
        tag = "stationary" if stationary else "per-step"
        t = time.perf_counter()
        exact = exact_counts(log, spec, stationary=stationary)
        print(f"{tag:<10} exact counts            {time.perf_counter() - t:6.2f} s")
        for name, learner in (("ve", ValueIterationCE()), ("apvi", APVI())):
            t = time.perf_counter()
            learner.fit(exact, reward, terminal_states=term)
            print(f"{tag:<10} {name:<24}{time.perf_counter() - t:6.2f} s")
        H, S, A = spec.H, spec.S, spec.A
        sigma = math.sqrt(2 * H / 1.0) * (math.sqrt(H) if stationary else 1.0)
        t = time.perf_counter()
        rv, rt = rng.spawn(2)
        nv = add_noise(exact.visits, mechanism="gaussian", scale=sigma, rng=rv, noise="exact")
        slices = [add_noise(exact.transitions_at(h), mechanism="gaussian", scale=sigma, rng=r, noise="exact")
                  for h, r in enumerate(rt.spawn(1 if stationary else H))]
        noisy = TabularCounts(visits=nv, transitions=lambda h: slices[0 if stationary else h], horizon=H,
                              stationary=stationary, noisy=True)
        t_noise = time.perf_counter() - t
        E = noise_bound("gaussian", sigma, 2 * S * S * A * (1 if stationary else H), 0.05, noise="exact")
        t = time.perf_counter()
        DPAPVI(noise_bound=E).fit(noisy, reward, terminal_states=term)
        print(f"{tag:<10} dp-apvi (rho=1, E={E:.0f})   {time.perf_counter() - t:6.2f} s "
              f"(+ {t_noise:.2f} s to draw the noise of all cells)")
        del slices, noisy, exact


if __name__ == "__main__":
    main()
