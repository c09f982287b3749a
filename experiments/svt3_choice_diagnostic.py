"""Issue 30: where svt3's audit at 10^6 runs per side loses against the Neyman-Pearson ceiling.

Replays the selection split of ``run_audit`` on ``svt3`` (``benchmarks/literature/svt.py``, pair half_half)
with the auditor's own code (``fit_candidates``, ``learned_candidates``, ``binned_candidates`` fitted on the
first half, ``choose_event`` on the second, as ``privaudit.audit.runner._select`` does; draws from
``numpy.random.default_rng(seed)``, not the audit's streams) and then judges every candidate **exactly**: the
candidate's score is evaluated on every output of a fine grid, (k, v) for k = 1..10 and v on a grid of step
``--step``, plus "no answer", whose exact masses under D and D' come from
``experiments/svt_patterns_np.py`` (numerical integration). For each candidate it prints

* ``oracle``: the best expected evaluation bound (5x10^5 runs per side, level 0.025 per bound) over all of its
  thresholds and both directions: what the score's ranking of the outputs allows;
* ``picked``: the expected evaluation bound of the threshold the choice rule picks for it on the choice half;
* which candidate the rule picks overall, and that event's expected bound.

The Neyman-Pearson ceiling (any score) is 0.1495 at 5x10^5. Run::

    OPENBLAS_NUM_THREADS=1 nice -n 10 python experiments/svt3_choice_diagnostic.py --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))

from literature import svt  # noqa: E402
from svt_patterns_np import ALPHA_B, patterns, svt3_law  # noqa: E402

from privaudit.audit import bounds as B  # noqa: E402
from privaudit.audit import choice, learned  # noqa: E402
from privaudit.audit.attacks import fit_candidates  # noqa: E402
from privaudit.audit.binned import binned_candidates  # noqa: E402
from privaudit.audit.choice import choose_event  # noqa: E402
from privaudit.audit.graybox import sampler_hint  # noqa: E402
from privaudit.audit.inputs import input_pair  # noqa: E402
from privaudit.audit.learned import learned_candidates  # noqa: E402

N_EVAL = 500_000


def grid_outputs(step: float, lo: float = -400.0, hi: float = 400.0, m: int = 10, t: float = 1.0):
    """Every (k, v) output of the grid in svt3's encoding, and its exact masses under D and D' (half_half)."""
    rho = np.arange(-700.0, 700.0 + step / 2, step)
    d, d2 = patterns(m)["half_half"]
    m0, none0 = svt3_law(d, rho)
    m1, none1 = svt3_law(d2, rho)
    v = rho + t
    keep = (v >= lo) & (v <= hi)
    v = v[keep]
    rows = np.full((m * len(v) + 1, 2 * m), np.nan)
    for k in range(m):
        blk = slice(k * len(v), (k + 1) * len(v))
        rows[blk, 0:2 * k:2] = 0.0
        rows[blk, 2 * k] = 1.0
        rows[blk, 2 * k + 1] = v
    rows[-1, 0::2] = 0.0
    p0 = np.concatenate([m0[:, keep].ravel(), [none0]])
    p1 = np.concatenate([m1[:, keep].ravel(), [none1]])
    return rows, p0, p1


def exact_bound(score, t, direction, p0, p1, n=N_EVAL):
    """Expected evaluation bound of {score > t} ('+', counted on D') or {score <= t} ('-', counted on D)."""
    above = score > t
    P0, P1 = p0[above].sum(), p1[above].sum()
    tp, fp = (P1, P0) if direction == "+" else (1 - P0, 1 - P1)
    return float(np.log(max(B.cp_lower(tp * n, n, ALPHA_B), 1e-300)) - np.log(B.cp_upper(fp * n, n, ALPHA_B))), fp


def oracle(score, p0, p1, n=N_EVAL):
    """Best expected bound over every threshold and both directions of ``score`` on the grid."""
    o = np.argsort(-score, kind="stable")
    s = score[o]
    c0, c1 = np.minimum(np.cumsum(p0[o]), 1), np.minimum(np.cumsum(p1[o]), 1)
    last = np.r_[s[1:] != s[:-1], True]  # cut only between distinct scores
    c0, c1 = c0[last], c1[last]
    best = -np.inf
    for tp, fp in ((c1, c0), (1 - c0, 1 - c1)):
        bd = np.log(np.maximum(B.cp_lower(tp * n, n, ALPHA_B), 1e-300)) - np.log(B.cp_upper(fp * n, n, ALPHA_B))
        best = max(best, float(np.nanmax(bd)))
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--selection", type=int, default=500_000, help="selection runs per side (10^6 trials: 5x10^5)")
    ap.add_argument("--fit-runs", type=int, default=None,
                    help="learned attacks: fitting runs per side at most (default: privaudit's MAX_FIT_RUNS, "
                         "FEATURE_CELLS)")
    ap.add_argument("--shrink-z", type=float, nargs="*", default=[],
                    help="also report the event chosen with these values of choice.SHRINK_Z")
    ap.add_argument("--learned-only", action="store_true", help="fit and judge the learned attacks only")
    a = ap.parse_args(argv)
    if a.fit_runs:
        learned.MAX_FIT_RUNS, learned.FEATURE_CELLS = a.fit_runs, max(learned.FEATURE_CELLS, 300 * a.fit_runs)
    G, p0, p1 = grid_outputs(a.step)
    print(f"grid {len(G)} outputs, mass {p0.sum():.6f} / {p1.sum():.6f}", flush=True)
    d, d2 = patterns()["half_half"]
    pair = input_pair(d.tolist(), d2.tolist())
    for seed in a.seeds:
        t0 = time.process_time()
        rng = np.random.default_rng(seed)
        X0, X1 = svt.svt3(d, rng, a.selection), svt.svt3(d2, rng, a.selection)
        nf = a.selection // 2
        cands = [] if a.learned_only else fit_candidates(X0[:nf], X1[:nf], [],
                                                         hint=sampler_hint(svt.svt3, pair, X0[:nf], X1[:nf]))
        cands += [c for c in learned_candidates(X0[:nf], X1[:nf]) + binned_candidates(X0[:nf], X1[:nf])
                  if c is not None and (c.name.startswith("learned") or not a.learned_only)]
        _, chosen, t, direc, _ = choose_event(cands, X0[nf:], X1[nf:], ALPHA_B, 0.0, "generic", N_EVAL)
        print(f"seed {seed}: fitted in {time.process_time() - t0:.1f} s CPU", flush=True)
        for c in cands:
            s = c.score(G)
            _, _, tc, dc, rank = choose_event([c], X0[nf:], X1[nf:], ALPHA_B, 0.0, "generic", N_EVAL)
            picked, fp = exact_bound(s, tc, dc, p0, p1)
            mark = "  <= chosen" if c is chosen else ""
            print(f"  {c.name:24s} oracle {oracle(s, p0, p1):7.4f}  picked {picked:7.4f} (P {fp:.4f}, "
                  f"predicted {rank[0]:7.4f}){mark}", flush=True)
        for z in a.shrink_z:
            keep, choice.SHRINK_Z = choice.SHRINK_Z, z
            _, cz, tz, dz, _ = choose_event(cands, X0[nf:], X1[nf:], ALPHA_B, 0.0, "generic", N_EVAL)
            choice.SHRINK_Z = keep
            print(f"  seed {seed} SHRINK_Z {z}: chosen {cz.name} {dz}, expected bound "
                  f"{exact_bound(cz.score(G), tz, dz, p0, p1)[0]:.4f}", flush=True)
        print(f"  seed {seed} chosen {chosen.name} {direc} t={t:.4g}: expected bound "
              f"{exact_bound(chosen.score(G), t, direc, p0, p1)[0]:.4f}; {time.process_time() - t0:.1f} s CPU",
              flush=True)


if __name__ == "__main__":
    main()
