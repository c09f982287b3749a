"""The DP-testing literature's benchmark suite against privaudit's auditor (issue 30, item 4).

The mechanisms (``benchmarks/literature/``, written from the papers): report-noisy-max with Laplace and
exponential noise, with and without the value; the six sparse-vector variants of Lyu, Su & Li 2017;
NumericalSVT; histograms at the right and the wrong noise scale; float Laplace and Gaussian releases of a
count at several pairs; and the correct twin of each. Every one claims epsilon 0.1 (the Gaussian ones
rho = 0.005, read at delta 1e-6), as in Bichsel et al. 2021's evaluation, so the bounds sit next to the ones
DP-Sniper and StatDP-Fixed publish (``literature/published.py``).

Stages (run in this order; each prints one line per case and appends JSON lines to ``--out``):

* ``search``: every StatDP input pattern audited at ``--search`` runs per side, then the best one audited
  afresh at ``--trials`` runs per side (the verdict; independent of the search).
* ``confirm``: the pair of DP-Sniper's witness pattern (no search) and, with ``--chosen FILE``, the pair a
  previous ``search`` stage chose (its search runs are independent of these), audited at ``--trials``;
  with ``--all-pairs`` every pair of each case (one audit each: a verdict per pair, not per mechanism).
* ``false-alarms``: the correct cases on their main pair, ``--seeds`` seeds x ``--trials`` runs per side.

CPU seconds are ``time.process_time()`` of one ``run_audit`` call (this process, all its threads).

Usage: python benchmarks/bench_audit_literature.py search --search 100000 --trials 100000 [--only NAME ...]
       python benchmarks/bench_audit_literature.py confirm --trials 1000000 [--chosen search.jsonl]
       python benchmarks/bench_audit_literature.py false-alarms --seeds 50 --trials 20000
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace

from literature.published import dpsniper_best, statdp_fixed
from literature.suite import CASES, audit_case, false_alarms


def _fmt(v) -> str:
    return "n/r" if v is None else f"{v:.4f}"


def _emit(row: dict, out: str | None) -> None:
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")


def _print_row(r: dict) -> None:
    pub = dpsniper_best(r["case"], r["pair"])
    print(f"{r['case']:28s} {r['status']:7s} {r['pair']:22s} {r['verdict']:18s} {r['epsilon_lower_bound']:8.4f} "
          f"DP-Sniper {_fmt(pub):>7s} StatDP-Fixed {_fmt(statdp_fixed(r['case'])):>7s} "
          f"{r['cpu_s']:6.1f} s CPU  {r['candidate']}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["search", "confirm", "false-alarms"])
    ap.add_argument("--trials", type=int, default=1_000_000)
    ap.add_argument("--search", type=int, default=100_000)
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chosen", default=None, help="JSON lines of a search stage: its chosen pairs")
    ap.add_argument("--all-pairs", action="store_true", help="confirm: audit every pair of each case")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--selection-fraction", type=float, default=None,
                    help="AuditSettings.selection_fraction of the deciding audit (default: privaudit's 10%%)")
    ap.add_argument("--status", choices=["broken", "correct"], default=None, help="only the cases of this status")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    names = [n for n in (a.only or list(CASES)) if a.status in (None, CASES[n].status)]
    print(f"stage {a.stage}, {a.trials} runs per side, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores", flush=True)
    if a.stage == "false-alarms":
        for name in names:
            if CASES[name].status != "correct":
                continue
            r = false_alarms(CASES[name], a.seeds, a.trials)
            print(f"{name:28s} {r['pair']:22s} alarms {r['alarms']}/{r['seeds']}  max eps_lb/eps {r['max_ratio']:.3f}"
                  f"  {r['cpu_s_per_audit']:.2f} s CPU per audit", flush=True)
            _emit({"stage": a.stage, **r}, a.out)
        return
    chosen = {}
    if a.chosen:
        with open(a.chosen) as f:
            chosen = {r["case"]: r["pair"] for r in map(json.loads, f) if r.get("stage") == "search"}
    for name in names:
        case = CASES[name]
        if a.stage == "search":
            rows = [audit_case(case, a.search, a.trials, a.seed, a.selection_fraction)]
        else:
            pairs = [case.main_pair] + ([chosen[name]] if chosen.get(name, case.main_pair) != case.main_pair else [])
            pairs = list(case.pairs) if a.all_pairs else pairs
            rows = [audit_case(_with_main(case, p), 0, a.trials, a.seed + k, a.selection_fraction)
                    for k, p in enumerate(pairs)]
        for r in rows:
            _print_row(r)
            _emit({"stage": a.stage, **r}, a.out)
    print(f"done, load average {os.getloadavg()[0]:.1f}", flush=True)


def _with_main(case, pair: str):
    """``case`` with ``pair`` as its main pair (the pair a search-free audit uses)."""
    return replace(case, main_pair=pair)


if __name__ == "__main__":
    main()
