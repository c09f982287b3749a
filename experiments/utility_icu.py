"""Utility of VE, APVI and DP-APVI on ICU-Sepsis clinicians' logs (exact policy values).

Reproduce (about 15-25 minutes on 2 cores)::

    /tmp/venv/bin/python experiments/utility_icu.py

Writes ``experiments/out/utility_icu.json`` (every run), ``experiments/out/utility_icu.md``
(the tables) and ``docs/img/utility_icu.png`` (the plot).

Protocol
--------
* MDP: ICU-Sepsis (S = 716, A = 25, H = 20), terminal states absorbing; logs
  simulated with the clinicians' policy by ``privaudit.mdp.simulate`` (the
  project's vectorized simulator). For each seed one log of max(n) episodes
  is simulated; the log of size n is its first n episodes (episodes are
  i.i.d., so every prefix is a sample of size n; the sizes are nested).
* Exact counts (``privaudit.learners.tabular.counts.exact_counts``) per
  (seed, n, per-step | stationary) are computed once and shared by all
  algorithms and budgets.
* DP: (epsilon, delta = 1e-6) is turned into rho exactly as ``privaudit
  release`` does (``privacy.budget.resolve_budget``: tight CKS conversion)
  and the noise is the release's own mechanism object
  (``privaudit.release.mechanism.TabularRelease``: combined visits +
  transitions sensitivity, k = 1; stationary releases pool counts and have
  the larger stationary sensitivity), its ``noise_family`` (exact
  discrete Gaussian, ``privaudit.privacy.samplers``, the release default)
  applied to the exact counts: the same distribution as the counts
  of a ``release_logs`` folder, without writing 256 M-cell Parquet tables per
  run. E is the same object's ``noise_bound``.
* Shortcut (exact in distribution): transition noise is drawn only for rows
  (h, s, a) whose noisy visit count is > E/2. For the other rows DP-APVI's
  output does not depend on the transition counts at all: any projection has
  ñ <= n' + E/2 <= E, so the pair falls back to Q = 0 (see
  ``privaudit.learners.tabular.dp_apvi``), and drawing the noise would change nothing.
* Algorithms: ve (certainty equivalence), apvi (Yin & Wang 2021, the
  recommended baseline, Bernstein term only), apvi+16Hι/n (with Yin & Wang's lower-order
  term), dp-apvi at each epsilon.
* Metrics: the exact value v^pi (``evaluate_policy``) of the learned policy;
  the learner's own pessimistic estimate d0 . V_0 ("certified"); the share of
  logged steps on pairs with ñ > E ("trusted").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from privaudit.learners.tabular.apvi import APVI
from privaudit.learners.tabular.dp_apvi import DPAPVI
from privaudit.learners.tabular.counts import TabularCounts, exact_counts
from privaudit.learners.tabular.ve import ValueIterationCE
from privaudit.mdp.icu_sepsis import REFERENCE_VALUES, clinicians_policy, icu_sepsis_spec_doc, load_icu_sepsis
from privaudit.mdp.simulate import simulate
from privaudit.mdp.tabular import evaluate_policy
from privaudit.privacy.budget import resolve_budget
from privaudit.core.spec import DomainSpec
from privaudit.data.counts import SparseCounts
from privaudit.release.mechanism import TabularRelease

ROOT = Path(__file__).resolve().parents[1]
DP_DELTA = 1e-6
FAILURE_PROB = 0.05


class LazyNoisyTransitions:
    """Noisy n'_h(s, a, s') drawn only on rows with noisy visit count > E/2 (zeros elsewhere).

    One child generator per h (spawned up front), so the draws do not depend
    on the order in which the learner asks for steps.
    """

    def __init__(self, exact: SparseCounts, noisy_visits: np.ndarray, E: float, release: TabularRelease,
                 rng: np.random.Generator):
        self.exact, self.noisy_visits, self.E, self.release = exact, noisy_visits, E, release
        self.rngs = rng.spawn(1 if exact.stationary else exact.horizon)

    def __call__(self, h: int) -> np.ndarray:
        key = 0 if self.exact.stationary else h
        nv = self.noisy_visits if self.exact.stationary else self.noisy_visits[h]
        rows = np.maximum(nv, 0) > self.E / 2.0
        S, A = nv.shape
        out = np.zeros((S, A, S), dtype=np.int64)
        if rows.any():
            out[rows] = self.release.noise_family("transitions", self.exact.transitions_at(h)[rows],
                                                  rng=self.rngs[key])
        return out


def noisy_counts(exact: SparseCounts, spec: DomainSpec, epsilon: float, rng: np.random.Generator):
    """Counts distributed as a Gaussian (epsilon, 1e-6) release of ``exact``, and the learner's E."""
    release = _release(spec, epsilon, exact.stationary)
    E = release.noise_bound(FAILURE_PROB)
    rv, rt = rng.spawn(2)
    nv = release.noise_family("visits", exact.visits, rng=rv)
    trans = LazyNoisyTransitions(exact, nv, E, release, rt)
    counts = TabularCounts(visits=nv, transitions=trans, horizon=exact.horizon, stationary=exact.stationary,
                           noisy=True)
    return counts, E, release.budget.rho, release.families["visits"].scale


def _release(spec: DomainSpec, epsilon: float, stationary: bool) -> TabularRelease:
    """The Gaussian (epsilon, 1e-6) release mechanism ``privaudit release`` runs (exact discrete Gaussian noise)."""
    budget = resolve_budget(epsilon=epsilon, delta=DP_DELTA, mechanism="gaussian")
    return TabularRelease.plan(spec, budget, stationary=stationary, noise="exact")


def run(args) -> list[dict]:
    mdp = load_icu_sepsis()
    spec = DomainSpec.from_dict(icu_sepsis_spec_doc())
    reward, terminals = spec.public_reward_vector(), spec.terminal_states
    behaviour = clinicians_policy()
    rows: list[dict] = []
    root = np.random.default_rng(args.seed)
    for seed_idx, child in enumerate(root.spawn(args.seeds)):
        sim_rng, noise_rng = child.spawn(2)
        ns = [n for n in args.n if seed_idx < args.seeds_large or n < max(args.n)] if args.seeds_large else args.n
        t0 = time.perf_counter()
        log = simulate(mdp, behaviour, max(ns), sim_rng)
        print(f"seed {seed_idx}: simulated {max(ns)} episodes in {time.perf_counter() - t0:.1f}s",
              file=sys.stderr, flush=True)
        noise_streams = iter(noise_rng.spawn(len(ns) * 2 * len(args.eps)))
        for n in ns:
            sub = log.filter(pl.col("episode_id") < n)
            for stationary in (False, True):
                variant = "stationary" if stationary else "per-step"
                t = time.perf_counter()
                exact = exact_counts(sub, spec, stationary=stationary)
                visits_by_h = exact.visits

                def record(algo, eps, learner, extra, t_start):
                    v = evaluate_policy(mdp, learner.policy_.table)
                    trusted = float((visits_by_h * (learner.trusted_ if not stationary else learner.trusted_[0])).sum()
                                    / max(visits_by_h.sum(), 1))
                    rows.append(dict(seed=seed_idx, n=n, variant=variant, algo=algo, epsilon=eps, value=v,
                                     certified=learner.value_estimate(mdp.d0), trusted_share=trusted,
                                     seconds=time.perf_counter() - t_start, **extra))
                    print(f"  n={n:>8} {variant:<10} {algo:<8} eps={eps!s:<5} value={v:.4f} "
                          f"certified={rows[-1]['certified']:.4f} trusted={trusted:.3f} "
                          f"({rows[-1]['seconds']:.1f}s)", file=sys.stderr, flush=True)

                for algo, make in (("ve", ValueIterationCE), ("apvi", lambda: APVI(lower_order=False)),
                                   ("apvi+16Hι/n", lambda: APVI(lower_order=True))):
                    t = time.perf_counter()
                    learner = make().fit(exact, reward, terminal_states=terminals)
                    record(algo, None, learner, {}, t)
                for eps in args.eps:
                    t = time.perf_counter()
                    counts, E, rho, sigma = noisy_counts(exact, spec, eps, next(noise_streams))
                    learner = DPAPVI(noise_bound=E, failure_prob=FAILURE_PROB).fit(
                        counts, reward, terminal_states=terminals)
                    record("dp-apvi", eps, learner, {"E": E, "rho": rho, "sigma": sigma}, t)
                del exact
        if args.partial is not None:                   # checkpoint after every seed
            args.partial.parent.mkdir(parents=True, exist_ok=True)
            args.partial.write_text(json.dumps({"runs": rows}))
    return rows


def noise_bound_for(epsilon: float, stationary: bool) -> float:
    """The learner's E for an ICU-Sepsis (epsilon, 1e-6) Gaussian release (public numbers only)."""
    return _release(DomainSpec.from_dict(icu_sepsis_spec_doc()), epsilon, stationary).noise_bound(FAILURE_PROB)


def rows_from_log(text: str) -> list[dict]:
    """Parse the progress lines ``seed k: ...`` / ``n=... variant algo eps=... value=...`` of a run."""
    import re

    rows, seed = [], None
    pat = re.compile(r"n=\s*(\d+) (\S+)\s+(\S+)\s+eps=(\S+)\s+value=([\d.]+) certified=([\d.]+) "
                     r"trusted=([\d.]+) \(([\d.]+)s\)")
    for line in text.splitlines():
        m0 = re.match(r"seed (\d+):", line)
        if m0:
            seed = int(m0.group(1))
            continue
        m = pat.search(line)
        if m and seed is not None:
            n, variant, algo, eps, v, c, tr, sec = m.groups()
            eps = None if eps == "None" else float(eps)
            row = dict(seed=seed, n=int(n), variant=variant, algo=algo, epsilon=eps, value=float(v),
                       certified=float(c), trusted_share=float(tr), seconds=float(sec))
            if eps is not None:
                row["E"] = noise_bound_for(eps, variant == "stationary")
            rows.append(row)
    return rows


def _select(df: pl.DataFrame, variant: str, algo: str, eps) -> pl.DataFrame:
    """The runs of one table row: counts variant, algorithm and (DP only) epsilon."""
    sel = df.filter((pl.col("variant") == variant) & (pl.col("algo") == algo))
    return sel.filter(pl.col("epsilon").is_null() if eps is None else pl.col("epsilon") == eps)


def summarize(rows: list[dict], ns: list[int]) -> str:
    df = pl.DataFrame(rows, infer_schema_length=None)
    clin, opt = REFERENCE_VALUES["clinicians"], REFERENCE_VALUES["optimal"]
    lines = [f"Exact value of the learned policy on ICU-Sepsis (H = 20), mean ± sd over seeds "
             f"(clinicians {clin:.4f}, optimal {opt:.4f}); DP budgets are (ε, δ = 1e-6), Gaussian "
             f"mechanism; learner failure probability δ = {FAILURE_PROB}.", ""]
    header = "| algorithm | counts | " + " | ".join(f"n = {n:,}" for n in ns) + " |"
    lines += [header, "|" + "---|" * (2 + len(ns))]
    order = [("ve", None), ("apvi", None), ("apvi+16Hι/n", None)] + [("dp-apvi", e) for e in sorted(
        {r["epsilon"] for r in rows if r["epsilon"] is not None})]
    for variant in ("per-step", "stationary"):
        for algo, eps in order:
            sel = _select(df, variant, algo, eps)
            cells = []
            for n in ns:
                v = sel.filter(pl.col("n") == n)["value"].to_numpy()
                cells.append(f"{v.mean():.4f} ± {v.std(ddof=1) if v.size > 1 else 0:.4f} ({v.size})"
                             if v.size else "–")
            name = algo if eps is None else f"dp-apvi ε={eps:g}"
            lines.append(f"| {name} | {variant} | " + " | ".join(cells) + " |")
    lines += ["", "Diagnostics (means): certified = the learner's pessimistic estimate d0·V̂_0; trusted = "
              "share of logged steps on pairs (h, s, a) with ñ > E; E = noise bound.", "",
              "| algorithm | counts | " + " | ".join(f"n = {n:,}: certified / trusted" for n in ns) + " | E |",
              "|" + "---|" * (3 + len(ns))]
    for variant in ("per-step", "stationary"):
        for algo, eps in order:
            sel = _select(df, variant, algo, eps)
            cells = []
            for n in ns:
                s = sel.filter(pl.col("n") == n)
                cells.append(f"{s['certified'].mean():.3f} / {s['trusted_share'].mean():.3f}" if s.height else "–")
            E = sel["E"].mean() if "E" in sel.columns and eps is not None else 0.0
            name = algo if eps is None else f"dp-apvi ε={eps:g}"
            lines.append(f"| {name} | {variant} | " + " | ".join(cells) + f" | {E:.0f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], ns: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = pl.DataFrame(rows, infer_schema_length=None)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    eps_list = sorted({r["epsilon"] for r in rows if r["epsilon"] is not None})
    for ax, variant in zip(axes, ("per-step", "stationary")):
        for algo, eps, style in ([("ve", None, "o-"), ("apvi", None, "s-"), ("apvi+16Hι/n", None, "d-")]
                                 + [("dp-apvi", e, "^--") for e in eps_list]):
            sel = df.filter((pl.col("variant") == variant) & (pl.col("algo") == algo))
            sel = sel.filter(pl.col("epsilon").is_null() if eps is None else pl.col("epsilon") == eps)
            m, s, x = [], [], []
            for n in ns:
                v = sel.filter(pl.col("n") == n)["value"].to_numpy()
                if v.size:
                    x.append(n), m.append(v.mean()), s.append(v.std(ddof=1) if v.size > 1 else 0.0)
            label = algo if eps is None else f"dp-apvi ε={eps:g}"
            ax.errorbar(x, m, yerr=s, fmt=style, capsize=3, label=label)
        ax.axhline(REFERENCE_VALUES["clinicians"], color="gray", ls=":", label="clinicians 0.6920")
        ax.axhline(REFERENCE_VALUES["optimal"], color="k", ls="-.", label="optimal 0.7922")
        ax.set_xscale("log")
        ax.set_xlabel("episodes n in the log")
        ax.set_title(f"ICU-Sepsis, {variant} counts")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("exact value of the learned policy (H = 20)")
    axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--seeds-large", type=int, default=0,
                   help="run the largest n for only this many seeds (0: all seeds)")
    p.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--eps", type=float, nargs="+", default=[1.0, 5.0, 20.0])
    p.add_argument("--seed", type=int, default=2026, help="root seed of the experiment (simulated data)")
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "out")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "utility_icu.png")
    p.add_argument("--from-json", type=Path, default=None,
                   help="only re-make the tables and plot from a saved utility_icu.json / partial file")
    p.add_argument("--from-log", type=Path, default=None,
                   help="only re-make the tables and plot from this script's stderr progress log "
                        "(recovery when a run was stopped before writing its JSON)")
    args = p.parse_args(argv)
    args.partial = args.out / "utility_icu.partial.json"
    t0 = time.perf_counter()
    if args.from_log is not None:
        rows = rows_from_log(args.from_log.read_text())
        args.n = sorted({r["n"] for r in rows})
    elif args.from_json is not None:
        rows = json.loads(args.from_json.read_text())["runs"]
        args.n = sorted({r["n"] for r in rows})
    else:
        rows = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"seed": args.seed, "seeds": args.seeds, "seeds_large": args.seeds_large, "n": args.n,
            "eps": args.eps, "dp_delta": DP_DELTA, "failure_prob": FAILURE_PROB,
            "wall_seconds": time.perf_counter() - t0}
    (args.out / "utility_icu.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
    table = summarize(rows, sorted(args.n))
    (args.out / "utility_icu.md").write_text(
        f"<!-- generated by experiments/utility_icu.py (seed {args.seed}, {meta['wall_seconds']:.0f} s) -->\n"
        + table)
    plot(rows, sorted(args.n), args.plot)
    print(table)
    print(f"total {meta['wall_seconds']:.0f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
