"""Issue 30: the best event any auditor can find for svt3 and numerical_svt_small_noise on each StatDP pattern.

The two broken sparse-vector cases of the literature suite (``benchmarks/literature/svt.py``) that the
auditor does not flag reliably at 10^6 runs per side: ``svt3`` (Lyu, Su & Li 2017, Algorithm 3: eps 0.1,
c = 1, T = 1, rho ~ Lap(20), nu_i ~ Lap(20), 10 queries, releases the first answer above the noisy threshold
with its noisy value) and ``numerical_svt_small_noise`` (NumericalSVT of Wang et al. 2019 with a third of
the answer noise: rho ~ Lap(30), nu_i ~ Lap(120), c = 2, the answered queries released with fresh discrete
Laplace noise of scale 20). For each of the StatDP patterns of ``benchmarks/literature/suite.py`` this
script computes, **exactly** (numerical integration, no simulation), the output law under D and D', the
largest privacy loss, and the Neyman-Pearson curve: the events {loss >= t} in either direction. For each
such event it evaluates the bound an audit counting it on n fresh runs per side would prove in expectation
(``ln(CP_lower(p1 n) / CP_upper(p0 n))`` with the expected counts plugged in, each one-sided bound at
level 0.025 as ``run_audit`` at confidence 0.95), and reports the best event at n = 5x10^5 (the evaluation
split of a 10^6-run audit) and n = 10^6. No event chosen by any auditor can do better in expectation:
this is the ceiling of an audit at that run count.

svt3. The output is (k, v), the first position whose noisy answer clears the noisy threshold and its value
v = q_k + nu_k, or "no answer". Its density is f(v - q_k) G_k(v - T) with G_k(r) = integral over rho <= r
of p(rho) prod_{i<k} F(T + rho - q_i) (f, F: Laplace(20) density and cdf), computed by a cumulative
trapezoid over a rho grid of step ``--step`` on [-700, 700] (the Laplace tails beyond are below e^-35); v
on the same grid shifted by T. Mass check: the cells plus "no answer" sum to 1 within 1e-6 (printed).

numerical_svt_small_noise. The output is the set of "above" positions (none, one, or two; the loop stops
after the second) with a value for each. The values are fresh: q_k + discrete Laplace(20), independent of
the comparisons, so the law factorises: the pattern's probability (integral over rho of p(rho) times the
product of F(T + rho - q_i) for the "below" answers and 1 - F for the "above" ones, F the Laplace(120) cdf)
times the values'. A value whose query moved by 1 between D and D' has privacy loss +-1/20 exactly
(discrete Laplace: P(loss = +1/20) = 1/(1 + a) under D, a/(1 + a) under D', a = e^-1/20); an unmoved one 0.
So every output reduces, without loss, to (pattern, number of its moved values on D's side).

Run (about a minute of CPU; results: benchmarks/results/audit_literature.md, session 15)::

    nice -n 10 python experiments/svt_patterns_np.py [--step 0.02]
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from scipy import special

from privaudit.audit import bounds as B

ALPHA_B = 0.025  # one-sided level of each Clopper-Pearson bound at confidence 0.95 (run_audit's alpha / 2)
RUNS = (500_000, 1_000_000)


def patterns(m: int = 10) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The StatDP patterns of the literature suite (``benchmarks/literature/suite.py``), name -> (D, D')."""
    ones, h = np.ones(m), m // 2
    first = np.arange(m) < 1
    half = np.arange(m) < h
    return {"one_below": (ones, np.where(first, 0.0, 1.0)), "one_above": (ones, np.where(first, 2.0, 1.0)),
            "one_above_rest_below": (ones, np.where(first, 2.0, 0.0)),
            "one_below_rest_above": (ones, np.where(first, 0.0, 2.0)),
            "half_half": (ones, np.where(half, 2.0, 0.0)), "all_above": (ones, np.full(m, 2.0)),
            "all_below": (ones, np.zeros(m)), "x_shape": (np.where(half, 1.0, 0.0), np.where(half, 0.0, 1.0))}


def lap_pdf(x, b):
    return np.exp(-np.abs(x) / b) / (2 * b)


def lap_cdf(x, b):
    return np.where(x < 0, 0.5 * np.exp(np.minimum(x, 0) / b), 1 - 0.5 * np.exp(-np.maximum(x, 0) / b))


def svt3_law(q: np.ndarray, grid: np.ndarray, b_rho=20.0, b_nu=20.0, t=1.0) -> tuple[np.ndarray, float]:
    """svt3's output law: masses (m, len(grid)) of (k, v = grid + t) cells, and P(no answer)."""
    dr = grid[1] - grid[0]
    p = lap_pdf(grid, b_rho)
    F = lap_cdf(t + grid[None, :] - q[:, None], b_nu)  # (m, N): P(query i below | rho)
    prod = np.vstack([np.ones_like(grid), np.cumprod(F, axis=0)])  # prod_{i<k}, k = 0..m
    integrand = p[None, :] * prod
    G = np.concatenate([np.zeros((len(q) + 1, 1)),
                        np.cumsum(0.5 * (integrand[:, 1:] + integrand[:, :-1]) * dr, axis=1)], axis=1)
    v = grid + t
    dens = lap_pdf(v[None, :] - q[:, None], b_nu) * G[:-1]  # (m, N)
    return dens * dr, float(G[-1, -1])


def nsvt_law(q: np.ndarray, q2: np.ndarray, grid: np.ndarray, b_rho=30.0, b_nu=120.0, t=1.0, c=2):
    """numerical_svt_small_noise's pattern law: list of (positions above, P under q) over every pattern."""
    dr = grid[1] - grid[0]
    p = lap_pdf(grid, b_rho)
    F = lap_cdf(t + grid[None, :] - q[:, None], b_nu)
    m, out = len(q), []
    for n_above in range(c + 1):
        for pos in itertools.combinations(range(m), n_above):
            last = pos[-1] if n_above == c else m - 1  # the loop stops after the c-th "above"
            w = p.copy()
            for i in range(last + 1):
                w = w * ((1 - F[i]) if i in pos else F[i])
            out.append((pos, float(np.trapezoid(w, dx=dr))))
    return out


def np_curve(p0: np.ndarray, p1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Events {ln(p1/p0) >= t}: sorted losses, cumulative P under D' (p1) and D (p0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = np.log(p1) - np.log(p0)
    keep = (p1 > 0) & np.isfinite(loss)
    o = np.argsort(-loss[keep], kind="stable")
    return loss[keep][o], np.minimum(np.cumsum(p1[keep][o]), 1.0), np.minimum(np.cumsum(p0[keep][o]), 1.0)


def best_event(p0: np.ndarray, p1: np.ndarray, n: int, max_points: int = 20_000) -> dict:
    """The Neyman-Pearson event (either direction) with the largest expected bound at n runs per side."""
    best = {"bound": -np.inf}
    for direction, (a, b) in (("D' side", (p0, p1)), ("D side", (p1, p0))):
        loss, c1, c0 = np_curve(a, b)
        # thresholds: every cell boundary where the loss changes (subsampled to max_points, plus the tail)
        idx = np.unique(np.concatenate([np.linspace(0, len(loss) - 1, max_points).astype(int),
                                        np.arange(min(2000, len(loss)))]))
        lo = B.cp_lower(c1[idx] * n, n, ALPHA_B)
        hi = B.cp_upper(c0[idx] * n, n, ALPHA_B)
        with np.errstate(divide="ignore"):
            bd = np.log(np.maximum(lo, 1e-300)) - np.log(hi)
        j = int(np.argmax(np.nan_to_num(bd, nan=-np.inf)))
        if bd[j] > best["bound"]:
            i = idx[j]
            best = {"bound": float(bd[j]), "direction": direction, "p_tp": float(c1[i]), "p_fp": float(c0[i]),
                    "log_ratio": float(np.log(c1[i] / c0[i])), "loss_threshold": float(loss[i])}
    return best


def svt3_table(step: float) -> list[dict]:
    grid = np.arange(-700.0, 700.0 + step / 2, step)
    rows = []
    for name, (d, d2) in patterns().items():
        m0, none0 = svt3_law(d, grid)
        m1, none1 = svt3_law(d2, grid)
        p0 = np.concatenate([m0.ravel(), [none0]])
        p1 = np.concatenate([m1.ravel(), [none1]])
        mass = max(abs(p0.sum() - 1), abs(p1.sum() - 1))
        big = (p0 > 1e-12) & (p1 > 1e-12)
        loss = np.log(p0[big]) - np.log(p1[big])
        row = {"mechanism": "svt3", "pattern": name, "mass_error": mass,
               "max_abs_loss": float(np.abs(loss).max()), "loss_no_answer": float(np.log(none0 / none1))}
        for n in RUNS:
            row[n] = best_event(p0, p1, n)
        rows.append(row)
    return rows


def nsvt_table(step: float, scale: float = 20.0) -> list[dict]:
    grid = np.arange(-1200.0, 1200.0 + step / 2, step)
    a = np.exp(-1.0 / scale)
    s_d, s_o = 1 / (1 + a), a / (1 + a)  # P(value on D's side) under D and under D'
    rows = []
    for name, (d, d2) in patterns().items():
        law0, law1 = nsvt_law(d, d2, grid), nsvt_law(d2, d, grid)
        cells0, cells1 = [], []
        for (pos, w0), (_, w1) in zip(law0, law1):
            moved = int(sum(d[i] != d2[i] for i in pos))
            for j in range(moved + 1):  # j of the moved values on D's side (binomial)
                comb = special.comb(moved, j)
                cells0.append(w0 * comb * s_d ** j * s_o ** (moved - j))
                cells1.append(w1 * comb * s_o ** j * s_d ** (moved - j))
        p0, p1 = np.array(cells0), np.array(cells1)
        loss = np.log(p0) - np.log(p1)
        row = {"mechanism": "numerical_svt_small_noise", "pattern": name,
               "mass_error": max(abs(p0.sum() - 1), abs(p1.sum() - 1)), "max_abs_loss": float(np.abs(loss).max()),
               "loss_no_answer": float(loss[0])}
        for n in RUNS:
            row[n] = best_event(p0, p1, n)
        rows.append(row)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=float, default=0.02, help="integration step over rho (and v for svt3)")
    ap.add_argument("--only", choices=["svt3", "nsvt"], default=None)
    a = ap.parse_args(argv)
    t = time.process_time()
    rows = ([] if a.only == "nsvt" else svt3_table(a.step)) + ([] if a.only == "svt3" else nsvt_table(a.step))
    print("| mechanism | pattern | largest |loss| | best event at 5x10^5: P (tp side), P (fp side), log-ratio | "
          "expected eps_lb at 5x10^5 | at 10^6 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        e, f = r[RUNS[0]], r[RUNS[1]]
        print(f"| `{r['mechanism']}` | {r['pattern']} | {r['max_abs_loss']:.4f} | {e['p_tp']:.4f}, {e['p_fp']:.4f}, "
              f"{e['log_ratio']:.4f} ({e['direction']}) | **{e['bound']:.4f}** | {f['bound']:.4f} |  "
              f"mass err {r['mass_error']:.1e}")
    print(f"CPU {time.process_time() - t:.1f} s, step {a.step}")


if __name__ == "__main__":
    main()
