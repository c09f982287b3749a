"""Ablation: what limits DP-APVI on ICU-Sepsis? The C2·S·H·E·ι/ñ term vs the threshold ñ > E.

Run (about 2 minutes)::

    /tmp/venv/bin/python experiments/utility_icu_ablation.py

Uses one simulated clinicians' log (seed 2027) and stationary counts, with
the same noise as ``experiments/utility_icu.py``. For each n and epsilon it
fits DP-APVI with the paper's C2 = 16 and with C2 = 0. C2 = 0 keeps only the
Bernstein term over ñ − E and the ñ ≤ E fallback; the paper's guarantee does
not cover it. Writes ``experiments/out/utility_icu_ablation.md``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.tabular.counts import exact_counts
from privaudit.mdp.icu_sepsis import clinicians_policy, icu_sepsis_spec_doc, load_icu_sepsis
from privaudit.mdp.simulate import simulate
from privaudit.mdp.tabular import evaluate_policy
from privaudit.core.spec import DomainSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from utility_icu import FAILURE_PROB, noisy_counts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main():
    mdp = load_icu_sepsis()
    spec = DomainSpec.from_dict(icu_sepsis_spec_doc())
    reward, term = spec.public_reward_vector(), spec.terminal_states
    sim_rng, noise_rng = np.random.default_rng(2027).spawn(2)
    log = simulate(mdp, clinicians_policy(), 1_000_000, sim_rng)
    lines = ["Ablation: stationary DP-APVI on ICU-Sepsis, one seed; exact value (certified d0·V̂_0).", "",
             "| n | ε | E | C2 = 16 (paper) | C2 = 0 | share of steps with ñ > E |", "|---|---|---|---|---|---|"]
    streams = iter(noise_rng.spawn(6))
    for n in (100_000, 1_000_000):
        exact = exact_counts(log.filter(pl.col("episode_id") < n), spec, stationary=True)
        for eps in (1.0, 5.0, 20.0):
            t = time.perf_counter()
            counts, E, _, _ = noisy_counts(exact, spec, eps, next(streams))
            cells = []
            for c2 in (16.0, 0.0):
                L = DPAPVI(noise_bound=E, failure_prob=FAILURE_PROB, C2=c2).fit(counts, reward, terminal_states=term)
                cells.append(f"{evaluate_policy(mdp, L.policy_.table):.4f} ({L.value_estimate(mdp.d0):.3f})")
            share = float((exact.visits * L.trusted_[0]).sum() / exact.visits.sum())
            lines.append(f"| {n:,} | {eps:g} | {E:.0f} | {cells[0]} | {cells[1]} | {share:.3f} |")
            print(lines[-1], f"({time.perf_counter() - t:.1f}s)", file=sys.stderr, flush=True)
    out = ROOT / "experiments" / "out" / "utility_icu_ablation.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
