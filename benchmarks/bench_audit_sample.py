"""Audit privaudit's own mechanisms on the bundled ICU-Sepsis sample logs.

Runs the auditor with the current defaults (the synthetic canary pair built
from the spec: ``synthetic`` per step, ``synthetic-repeat`` pooled; exact
noise, as ``privaudit release``; the generic test) on the tabular release
(per-h and stationary, Gaussian rho = 1; Laplace eps = 5) and on DP-APVI
(stationary release at rho = 1), each at its claimed budget; plus the per-h
release with ``noise="rounded"`` and the GDP opt-in (the only case where
that test is valid), and prints one line per audit: verdict, eps lower bound,
claimed eps, the GDP mu bound (information only unless opted in) against the
claimed mu, the resolution limit, wall and CPU time. Writes the reports and
plots to --out.

Usage: python benchmarks/bench_audit_sample.py [--trials 100000] [--apvi-trials 100] [--out DIR] [--seed 0]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np
import polars as pl

from privaudit.audit import AuditSettings, make_pair, run_audit
from privaudit.audit.mechanisms.dp_apvi import DPAPVIMechanism
from privaudit.audit.mechanisms.release import ReleaseMechanism
from privaudit.core.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--apvi-trials", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path("audit_sample_reports"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", help="run only these audits (names as printed)")
    args = ap.parse_args(argv)
    spec = load_spec(ROOT / "sample_data/icu_sepsis_spec.json")
    logs = pl.read_parquet(ROOT / "sample_data/icu_sepsis_clinicians_20k.parquet")
    pairs = {c: make_pair(logs, spec, c, rng=np.random.default_rng(args.seed))
             for c in ("synthetic", "synthetic-repeat")}
    args.out.mkdir(parents=True, exist_ok=True)
    cases = [  # (name, mechanism, trials, canary, claim kind): the defaults of `privaudit audit`
        ("release-gaussian-per-h", ReleaseMechanism(spec, rho=1.0, delta=1e-6), args.trials, "synthetic",
         "generic"),
        ("release-gaussian-per-h-rounded-gdp", ReleaseMechanism(spec, rho=1.0, delta=1e-6, noise="rounded"),
         args.trials, "synthetic", "gaussian"),
        ("release-gaussian-stationary", ReleaseMechanism(spec, rho=1.0, delta=1e-6, stationary=True), args.trials,
         "synthetic-repeat", "generic"),
        ("release-laplace-per-h", ReleaseMechanism(spec, epsilon=5.0, mechanism="laplace"), args.trials,
         "synthetic", "generic"),
        ("dp-apvi-stationary", DPAPVIMechanism(spec, rho=1.0, delta=1e-6, stationary=True), args.apvi_trials,
         "synthetic-repeat", "generic"),
    ]
    print(f"ICU-Sepsis sample: {logs['episode_id'].n_unique()} episodes, H={spec.H} S={spec.S} A={spec.A}")
    print(f"{'audit':>34} {'canary':>16} {'trials':>7} {'verdict':>19} {'eps_lb':>7} {'claim eps':>9} {'mu_lb':>6} "
          f"{'claim mu':>8} {'cap eps':>7} {'wall s':>7} {'cpu s':>7}")
    only = set(args.only or [c[0] for c in cases])
    for name, mech, trials, canary, kind in cases:
        if name not in only:
            continue
        t = time.perf_counter()
        cpu0 = _cpu()
        r = run_audit(mech, claim=mech.claim(kind=kind), pair=pairs[canary], trials=trials, seed=args.seed,
                      settings=AuditSettings(mechanism_name=name))
        wall, cpu = time.perf_counter() - t, _cpu() - cpu0
        r.write_json(args.out / f"{name}.json")
        r.plot(args.out / f"{name}.png")
        g = r.data["method"]["gaussian"]
        cap = r.data["resolution_limit"]
        cmu = r.data["claim"]["mu"]
        print(f"{name:>34} {canary:>16} {trials:>7} {r.verdict:>19} {r.epsilon_lower_bound:7.3f} {r.data['claimed_epsilon']:9.3f} "
              f"{g['mu_lower_bound']:6.3f} {('-' if cmu is None else f'{cmu:.3f}'):>8} "
              f"{r.data['method']['resolution_epsilon']:7.2f} {wall:7.1f} {cpu:7.1f}", flush=True)


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the machine is shared: wall time misleads)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


if __name__ == "__main__":
    main()
