"""Issue 28, item 5: the coverage of every certificate privaudit prints, at its stated level.

Extends the coverage part of ``experiments/utility_icu_learners.py`` (issue 12: random
non-stationary MDPs, one stay per unit) to what issue 28 found broken: per-step and pooled
counts, rewards that change with h, k in {1, 5, 20} stays per privacy unit sharing a start state,
several budgets and sizes, and a negative control that shows the study can fail.

Reproduce (results: docs/certificates.md, "Coverage study"; run it niced, the machine is shared)::

    nice -n 10 python experiments/certificate_coverage.py --runs 40

Writes ``experiments/results/certificate_coverage.json`` (every cell: configuration, runs,
failures, Clopper-Pearson 95% interval of the failure rate) and ``.md`` (the table).

Three studies, each failure counted against the failure probability the certificate states:

1. **DP-PBB** (``certified_value(d0)`` with the MDP's d0, and ``certified_value()`` from the
   private start counts), failure_prob 0.05, on MDPs of :data:`KINDS`: random tabular MDPs
   (``privaudit.mdp.random_tabular.random_tabular_mdp``, S = 4, A = 2, H = 8) made stationary (pooled counts,
   r(s, a)), with a reward that changes with h (stationary dynamics, pooled counts, r_h(s, a)),
   or non-stationary (per-step counts); and the two MDPs of issue 28's failures (a reward
   reachable only from step h0 with per-step dynamics; a reward that starts at h0 with stationary
   dynamics). Logs: units of k stays that share a start state (d0), behaviour uniform, cap c = 1
   per unit and cell; budgets rho in {1, 10}; 2,000 or 20,000 stays.
2. **Start bound alone** (``learners.confidence.start_mean_lower_bound``, stated 5%): a fixed
   W = (1, 0, 0.5) on d0 = (0.5, 0.5, 0), units of k stays sharing a start state, noisy counts;
   and the **negative control**: the same bound told k = 1 (stays as independent draws, the
   pre-issue-28 radius) on logs with k = 20.
4. **DP policy evaluation from logs** (``evaluate --logs`` and ``pipeline --hold-out``): lower bound and
   interval, fixed and held-out learned policies, every kind plus rewards in [-1, 1]
   (``experiments/coverage_ope.py``).
3. **Clinicians' interval** (``release.behaviour_value.estimate_behaviour_value``, stated 95%):
   units of k stays whose returns are Bernoulli(p_u) with a unit-level p_u in {0.75, 0.95}
   (strong correlation within a unit), the behaviour-value release's noise at rho in {0.5, 4};
   and the normal interval estimate -+ 1.96 standard errors (the pre-issue-28 interval) as a
   second negative control.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

from privaudit.core.spec import DomainSpec
from privaudit.learners.confidence import gaussian_tail, start_mean_lower_bound
from privaudit.learners.tabular.dp_pbb import DPPBB
from privaudit.learners.tabular.pbb_counts import CappedCounts
from privaudit.mdp.random_tabular import random_tabular_mdp
from privaudit.mdp.tabular import TabularMDP, evaluate_policy
from privaudit.privacy.budget import resolve_budget
from privaudit.release.behaviour_value import BehaviourValueRelease, estimate_behaviour_value

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coverage_ope import study_ope  # noqa: E402 - the study 4 module, next to this script

OUT = Path(__file__).resolve().parent / "results" / "certificate_coverage"
KINDS = ("stationary", "reward-varies-with-h", "non-stationary", "late-reward-per-step", "late-reward-stationary")
KS = (1, 5, 20)


def clopper_pearson(fails: int, runs: int, level: float = 0.95) -> list[float]:
    """Two-sided Clopper-Pearson interval of a failure rate (Clopper & Pearson 1934)."""
    a = (1 - level) / 2
    lo = 0.0 if fails == 0 else float(stats.beta.ppf(a, fails, runs - fails + 1))
    hi = 1.0 if fails == runs else float(stats.beta.ppf(1 - a, fails + 1, runs - fails))
    return [lo, hi]


def make_mdp(kind: str, seed: int) -> tuple[TabularMDP, np.ndarray, bool]:
    """(MDP, the reward DP-PBB is given, pooled counts?) for one kind of :data:`KINDS`."""
    if kind.startswith("late-reward"):
        H, h0 = 10, 2                        # the MDPs of tests/learners/tabular/test_certificates.py
        if kind == "late-reward-per-step":
            P = np.zeros((H, 3, 2, 3))
            P[:, 0, 0, 0] = 1.0
            P[:h0, 0, 1, 2] = 1.0
            P[h0:, 0, 1, 1], P[h0:, 0, 1, 2] = 0.9, 0.1
            P[:, 1, :, 1] = P[:, 2, :, 2] = 1.0
            r = np.zeros((3, 2, 3))
            r[:, :, 1] = 1.0
            mdp = TabularMDP(P=P, r=r, d0=np.array([1.0, 0, 0]), horizon=H, terminal_states=(1, 2))
            return mdp, np.array([0.0, 1.0, 0.0]), False
        P = np.zeros((3, 2, 3))
        P[0, 0, 0], P[0, 1, 1] = 1.0, 1.0
        P[1, :, 1] = P[2, :, 2] = 1.0
        r = np.zeros((H, 3, 2))
        r[h0:, 0, 1] = 1.0
        return TabularMDP(P=P, r=r, d0=np.array([1.0, 0, 0]), horizon=H, terminal_states=(1, 2)), r, True
    base = random_tabular_mdp(4, 2, 8, seed)
    if kind == "non-stationary":
        return base, base.r, False
    r = base.r if kind == "reward-varies-with-h" else base.r[0]
    mdp = TabularMDP(P=base.P[0], r=r if r.ndim == 3 else np.broadcast_to(r, base.r.shape).copy(), d0=base.d0,
                     horizon=base.horizon)
    return mdp, r, True


def simulate_counts(mdp: TabularMDP, n_units: int, k: int, pooled: bool, rng: np.random.Generator) -> CappedCounts:
    """Counts of n_units units of k stays each (a unit's stays share a start state ~ d0), uniform behaviour,
    at most c = 1 kept transition per unit and cell (pooled: (s, a); per step: (h, s, a))."""
    H, S, A = mdp.horizon, mdp.n_states, mdp.n_actions
    unit = np.repeat(np.arange(n_units), k)
    s = np.repeat(rng.choice(S, size=n_units, p=mdp.d0), k)
    starts = np.bincount(s, minlength=S)
    N = np.zeros((H, S * A, S), dtype=np.int64)
    seen = np.zeros((n_units, S * A), dtype=bool)
    live = ~np.isin(s, mdp.terminal_states)
    for h in range(H):
        idx = np.flatnonzero(live)
        a = rng.integers(0, A, size=idx.size)
        cum = np.cumsum(mdp.transition(h)[s[idx], a], axis=1)
        s2 = np.minimum((rng.random(idx.size)[:, None] > cum).sum(1), S - 1)
        cell = s[idx] * A + a
        if not pooled:
            seen[:] = False
        keep = ~seen[unit[idx], cell]
        # two stays of one unit in the same cell at this step: keep the first (c = 1)
        first = np.zeros(idx.size, dtype=bool)
        _, pos = np.unique(unit[idx] * (S * A) + cell, return_index=True)
        first[pos] = True
        keep &= first
        seen[unit[idx][keep], cell[keep]] = True
        np.add.at(N[h], (cell[keep], s2[keep]), 1)
        s[idx] = s2
        live[idx] = ~np.isin(s2, mdp.terminal_states)
    t = N.reshape(H, S, A, S)
    return CappedCounts.from_arrays(t.sum(0) if pooled else t, horizon=H, max_episodes=k, max_per_cell=1,
                                    starts=starts)


def study_dppbb(runs: int, seed: int) -> list[dict]:
    """Study 1: DP-PBB's two certified values against the exact value of its policy."""
    rows, root = [], np.random.default_rng(seed)
    for kind in KINDS:
        for k in KS:
            for rho in (1.0, 10.0):
                for stays in (2000, 20000):
                    f_d0 = f_start = positive = 0
                    sums = np.zeros(3)                                  # value, certified(d0), certified()
                    for i, child in enumerate(root.spawn(runs)):
                        mdp, reward, pooled = make_mdp(kind, seed=1000 + i)
                        counts = simulate_counts(mdp, stays // k, k, pooled, child)
                        fit = DPPBB(rho=rho, failure_prob=0.05).fit(counts, reward, terminal_states=mdp.terminal_states,
                                                                     rng=child.spawn(1)[0])
                        v = evaluate_policy(mdp, fit.policy_.table)
                        c0, cs = fit.certified_value(mdp.d0), fit.certified_value()
                        f_d0 += c0 > v + 1e-9
                        f_start += cs > v + 1e-9
                        positive += c0 > 1e-9
                        sums += (v, c0, cs)
                    for name, f in (("dp-pbb certified_value(d0)", f_d0), ("dp-pbb certified_value()", f_start)):
                        rows.append({"study": "dp-pbb", "certificate": name, "kind": kind, "k": k, "rho": rho,
                                     "stays": stays, "runs": runs, "failures": int(f), "stated": 0.05,
                                     "positive": int(positive), "cp95": clopper_pearson(int(f), runs),
                                     "mean_value": sums[0] / runs,
                                     "mean_certified": sums[1 if name.endswith("(d0)") else 2] / runs})
    return rows


def _start_fail_rate(k: int, told_k: int, n_units: int, sims: int, rng: np.random.Generator) -> int:
    d0, W, sigma, beta = np.array([0.5, 0.5, 0.0]), np.array([1.0, 0.0, 0.5]), 2.0, 0.05
    units = rng.multinomial(n_units, d0, size=sims)
    noisy = k * units + rng.normal(0.0, sigma, size=units.shape)
    t = gaussian_tail(beta / 4)
    lb = np.array([start_mean_lower_bound(W, m, sigma, 1.0, max_episodes=told_k, t=t, t_total=t,
                                          log_term=math.log(4 / beta)) for m in noisy])
    return int((lb > d0 @ W).sum())


def study_start(sims: int, seed: int) -> list[dict]:
    """Study 2: the start bound alone, and its negative control (k ignored at k = 20)."""
    rows, rng = [], np.random.default_rng(seed)
    for k in KS:
        for n_units in (50, 1000):
            f = _start_fail_rate(k, k, n_units, sims, rng)
            rows.append({"study": "start", "certificate": "start bound", "k": k, "units": n_units, "runs": sims,
                         "failures": f, "stated": 0.05, "cp95": clopper_pearson(f, sims)})
    for n_units in (50, 1000):
        f = _start_fail_rate(20, 1, n_units, sims, rng)
        rows.append({"study": "start", "certificate": "NEGATIVE CONTROL: start bound told k = 1", "k": 20,
                     "units": n_units, "runs": sims, "failures": f, "stated": 0.05, "cp95": clopper_pearson(f, sims)})
    return rows


def study_interval(sims: int, seed: int) -> list[dict]:
    """Study 3: the clinicians' 95% interval, and the normal interval as a negative control."""
    rows, rng = [], np.random.default_rng(seed)
    for k in KS:
        spec = DomainSpec.from_dict({"format_version": 1, "dataset_id": "cov", "horizon": 6, "n_states": 3,
                                     "n_actions": 2, "terminal_states": [], "reward_range": [0.0, 1.0],
                                     "return_bound": [0.0, 1.0],
                                     "privacy_unit": {"column": "unit_id" if k > 1 else None, "max_episodes": k}})
        for rho in (0.5, 4.0):
            rel = BehaviourValueRelease.plan(spec, resolve_budget(rho=rho))
            for n_units in (40, 400):
                miss = miss_normal = 0
                for _ in range(sims):
                    p_u = np.where(rng.random(n_units) < 0.5, 0.75, 0.95)
                    G = rng.random((n_units, k)) < p_u[:, None]
                    c = np.where(G, 1, -1).astype(np.int64) << (rel.bits - 1)     # G - 1/2 on the lattice
                    t_u, n_u = c.sum(1), np.full(n_units, k, dtype=np.int64)
                    ex = {"episode_count": int(n_u.sum()), "return_sum": int(t_u.sum()),
                          "return_squares": int((t_u * t_u).sum()), "start_states": np.array([k * n_units, 0, 0])}
                    if k > 1:
                        ex.update(unit_return_cross=int((t_u * n_u).sum()), unit_count_squares=int((n_u ** 2).sum()))
                    est = estimate_behaviour_value(rel.noisy(ex, rng=rng))
                    lo, hi = est["interval"]
                    miss += not (lo <= 0.85 <= hi)
                    miss_normal += abs(est["estimate"] - 0.85) > 1.96 * est["standard_error"]
                for name, f in (("clinicians' 95% interval", miss),
                                ("NEGATIVE CONTROL: normal interval (pre-issue-28)", miss_normal)):
                    rows.append({"study": "interval", "certificate": name, "k": k, "rho": rho, "units": n_units,
                                 "runs": sims, "failures": int(f), "stated": 0.05, "cp95": clopper_pearson(int(f), sims)})
    return rows


def table(rows: list[dict]) -> str:
    """The markdown table of every cell."""
    head = ("| certificate | setting | runs | failures | CP 95% of the failure rate | stated | mean value / certified |\n"
            "|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        setting = ", ".join(f"{key} {r[key]}" for key in ("kind", "k", "rho", "stays", "units") if key in r)
        flag = " **above**" if r["cp95"][0] > r["stated"] else ""
        lines.append(f"| {r['certificate']} | {setting} | {r['runs']} | {r['failures']} | "
                     f"[{r['cp95'][0]:.4f}, {r['cp95'][1]:.4f}]{flag} | {r['stated']} | "
                     + (f"{r['mean_value']:.3f} / {r['mean_certified']:.3f} |" if "mean_value" in r else "|"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40, help="DP-PBB runs per cell (each a new MDP instance and log)")
    ap.add_argument("--sims", type=int, default=2000, help="simulations per cell of studies 2 and 3")
    ap.add_argument("--ope-runs", type=int, default=100, help="runs per cell of study 4 (experiments/coverage_ope.py)")
    ap.add_argument("--studies", nargs="+", default=["certificates", "ope"], choices=["certificates", "ope"],
                    help="certificates: studies 1-3 (certificate_coverage.{json,md}); ope: study 4 "
                         "(certificate_coverage_ope.{json,md})")
    ap.add_argument("--seed", type=int, default=28)
    args = ap.parse_args(argv)
    command = "python experiments/certificate_coverage.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if "certificates" in args.studies:
        t0 = time.time()
        rows = study_start(args.sims, args.seed) + study_interval(args.sims, args.seed + 1)
        rows += study_dppbb(args.runs, args.seed + 2)
        _write(OUT, rows, command, t0)
    if "ope" in args.studies:
        t0 = time.time()
        rows = study_ope(args.ope_runs, args.seed + 3, KINDS + ("rewards-in-[-1,1]",), KS, make_mdp,
                         simulate_counts, clopper_pearson)
        _write(OUT.with_name(OUT.name + "_ope"), rows, command, t0)
    return 0


def _write(out: Path, rows: list[dict], command: str, t0: float) -> None:
    meta = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "seconds": round(time.time() - t0, 1), "command": command}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    out.with_suffix(".md").write_text(f"{meta['command']} ({meta['date']}, {meta['seconds']} s)\n\n{table(rows)}\n")
    print(table(rows))


if __name__ == "__main__":
    sys.exit(main())
