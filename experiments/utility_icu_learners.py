"""Issue 12, item 3: every tabular learner on ICU-Sepsis, and the coverage of their certificates.

Reproduce (results in docs/results.md; run it niced, the machine is shared)::

    nice -n 10 python experiments/utility_icu_learners.py            # both parts
    nice -n 10 python experiments/utility_icu_learners.py --part coverage --coverage-runs 240

Writes ``experiments/results/utility_icu_learners.json`` (every run, with its seed
and configuration: simulated data only), ``experiments/results/utility_icu_learners.md``
(the tables) and ``docs/img/utility_icu_learners.png`` (the plot).

Part 1: the issue's table
-------------------------
ICU-Sepsis (S = 716, A = 25, H = 20, stationary dynamics), logs simulated with
the clinicians' policy (``privaudit.mdp.simulate``); for each seed one log of
max(stays) stays, the log of n stays being its first n (stays are i.i.d.).
Every learner in :data:`LEARNERS` that the registry lists (non-private
baselines once per log, private learners at each epsilon, delta = 1e-6)
is fitted on counts pooled over h (the rule of every command for a stationary
MDP). Per run: the exact value of the learned policy
(``privaudit.mdp.tabular.evaluate_policy``), its certified value (the
learner's pessimistic estimate d0 . V_0, ``value_estimate``), and whether the
certificate held (certified <= exact value).

Private learners see exactly the distribution of a ``privaudit release``:
the release mechanism object (``privaudit.release.mechanism.TabularRelease``,
exact discrete Gaussian noise on every cell of the declared domain, (epsilon,
1e-6) turned into rho by the tight conversion ``resolve_budget`` uses) applied
to the exact counts of the simulated logs, without writing Parquet tables.

Part 2: coverage of the certificate
-----------------------------------
``--coverage-runs`` runs on small random tabular MDPs
(``privaudit.mdp.random_tabular``: non-stationary Dirichlet transitions,
uniform mean rewards r_h(s, a), given to every learner as a known reward so
that no learner spends budget on rewards), cycling through
:data:`COVERAGE_GRID` (S, A, H, number of episodes of the uniform behaviour
policy) and :data:`COVERAGE_EPS`; each run has a new MDP instance and a new
log and fits every learner once (per-step counts: the MDPs are not
stationary). Plus every ICU run of part 1. Reported per learner: runs,
certificates that held, the Clopper-Pearson 95% interval of the coverage,
next to 1 - failure_prob, and how many certificates were positive (a
certificate of 0 holds trivially).

Learners: every tabular learner of the registry with a runner in
:data:`LEARNERS` (ve, apvi, apvi-hoeffding, dp-apvi with Qiao & Wang (2023)'s
constants), DP-PBB (``privaudit.learners.tabular.dp_pbb``, the issue-12 learner, its
default constants, per-cell cap c = 1, the spec's return bound), and two
unregistered variants for reference: APVI with Yin & Wang's lower-order term
and DP-APVI with C2 = 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

from privaudit.core import registry
from privaudit.data.bounding import bound_contributions, cap_per_cell
from privaudit.audit.bounds import cp_lower, cp_upper
from privaudit.learners.tabular.dp_pbb import DPPBB
from privaudit.learners.tabular.pbb_counts import CappedCounts
from privaudit.learners.tabular.counts import TabularCounts
from privaudit.mdp.icu_sepsis import REFERENCE_VALUES, clinicians_policy, icu_sepsis_spec_doc, load_icu_sepsis
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate, uniform_policy
from privaudit.mdp.tabular import TabularMDP, evaluate_policy
from privaudit.privacy.budget import resolve_budget
from privaudit.core.spec import DomainSpec
from privaudit.data.counts import SparseCounts, sparse_counts
from privaudit.release.mechanism import TabularRelease

ROOT = Path(__file__).resolve().parents[1]
DP_DELTA = 1e-6
#: failure_prob of every learner (its certificate should hold in >= 1 - FAILURE_PROB of runs).
FAILURE_PROB = 0.05
#: Slack of the "certificate held" test (float rounding of two sums of ~10^3 terms).
HELD_TOL = 1e-9


# ----------------------------------------------------------------------------- data of one run


@dataclass
class Data:
    """One simulated log of a known MDP, with its exact counts (computed once, shared by the learners).

    ``reward`` is public for every learner: ICU-Sepsis' next-state reward r(s') (its spec declares it),
    or a random MDP's mean reward r_h(s, a) (declared known, the papers' footnote; so no learner
    spends budget on reward sums and every learner plans with the same reward).
    """

    mdp: TabularMDP
    spec: DomainSpec
    frame: pl.DataFrame
    stationary: bool
    reward: np.ndarray
    _cache: dict

    @classmethod
    def of(cls, mdp, spec, frame, stationary):
        reward = spec.public_reward_scaled()
        if reward is None:  # a known mean reward r_h(s, a) in [0, 1] (random tabular MDPs)
            reward = mdp.r
            doc = spec.to_dict()
            # the release of counts only: no reward family (the reward is known, so nobody releases it)
            doc["public_reward"] = {"kind": "next_state", "values": {}}
            spec = DomainSpec.from_dict(doc)
        return cls(mdp, spec, frame, stationary, reward, {})

    def exact(self) -> SparseCounts:
        """Exact counts of the bounded logs (no reward sums: the reward is known)."""
        if "exact" not in self._cache:
            self._cache["exact"] = sparse_counts(self.frame, self.spec, stationary=self.stationary, rewards=False)
        return self._cache["exact"]

    def capped(self, c: int) -> SparseCounts:
        """Exact counts after bounding and the per-cell cap c (``privaudit.data.bounding.cap_per_cell``)."""
        key = ("capped", c)
        if key not in self._cache:
            bounded, report = bound_contributions(self.frame.lazy(), self.spec)
            capped, _ = cap_per_cell(bounded, report, c, stationary=self.stationary)
            self._cache[key] = sparse_counts(capped, self.spec, stationary=self.stationary, rewards=False)
        return self._cache[key]


def release_plan(spec: DomainSpec, epsilon: float, stationary: bool) -> TabularRelease:
    """The Gaussian (epsilon, 1e-6) count release ``privaudit release`` plans for ``spec``."""
    budget = resolve_budget(epsilon=epsilon, delta=DP_DELTA, mechanism="gaussian")
    return TabularRelease.plan(spec, budget, stationary=stationary, noise="exact")


def noisy_counts(data: Data, release: TabularRelease, rng: np.random.Generator) -> TabularCounts:
    """The counts of one release of ``data``'s logs (every cell noised), as the learners' counts protocol."""
    noisy = release.apply(data.exact(), rng=rng)
    slices = dict(noisy.transitions)
    get = (lambda h: slices[0]) if release.stationary else (lambda h: slices[h])
    return TabularCounts(visits=noisy.visits, transitions=get, horizon=release.spec.H,
                         stationary=release.stationary, noisy=True)


# ----------------------------------------------------------------------------- the learners


@dataclass(frozen=True)
class Runner:
    """How the harness fits one registered learner: ``fit(data, epsilon, rng) -> fitted learner``."""

    private: bool
    fit: Callable


def _fit_exact(name: str, **params):
    def fit(data: Data, epsilon, rng):
        cls = registry.get(name).load()
        return cls(**params).fit(data.exact(), data.reward, terminal_states=data.spec.terminal_states,
                                 reward_range=data.spec.reward_range)
    return fit


def _fit_dp_apvi(data: Data, epsilon: float, rng, **params):
    """DP-APVI (Qiao & Wang (2023)'s constants unless ``params`` say otherwise) on one release: E from the release."""
    cls = registry.get("dp-apvi").load()
    release = release_plan(data.spec, epsilon, data.stationary)
    E = release.noise_bound(FAILURE_PROB)
    return cls(noise_bound=E, failure_prob=FAILURE_PROB, **params).fit(
        noisy_counts(data, release, rng), data.reward, terminal_states=data.spec.terminal_states,
        reward_range=data.spec.reward_range)


#: Per-cell cap of DP-PBB's counts in this study (one step per unit and cell).
PBB_MAX_PER_CELL = 1


def _fit_dp_pbb(data: Data, epsilon: float, rng):
    """DP-PBB (issue 12) at (epsilon, 1e-6): its own releases from the capped exact counts, the spec's return bound."""
    budget = resolve_budget(epsilon=epsilon, delta=DP_DELTA, mechanism="gaussian")
    counts = CappedCounts.from_sparse(data.capped(PBB_MAX_PER_CELL), starts=None,
                                      max_episodes=data.spec.max_episodes_per_unit, max_per_cell=PBB_MAX_PER_CELL)
    rb = data.spec.return_bound
    return DPPBB(failure_prob=FAILURE_PROB).fit(
        counts, data.reward, terminal_states=data.spec.terminal_states, reward_range=data.spec.reward_range,
        return_bound=None if rb is None else rb[1], budget=budget, rng=rng)


#: Registered name -> how to fit it. Learners of the registry that are missing here are reported as
#: skipped (the script says which), never silently dropped.
LEARNERS: dict[str, Runner] = {
    "ve": Runner(False, _fit_exact("ve")),
    "apvi": Runner(False, _fit_exact("apvi", failure_prob=FAILURE_PROB)),
    "apvi-hoeffding": Runner(False, _fit_exact("apvi-hoeffding", failure_prob=FAILURE_PROB)),
    "dp-apvi": Runner(True, _fit_dp_apvi),
    "dp-pbb": Runner(True, _fit_dp_pbb),
    # variants (not registered): APVI with Yin & Wang's lower-order term, and DP-APVI without its
    # C2 S H E iota / n privacy term (docs/results.md, "C2 = 0": it learns, its certificate is not valid)
    "apvi+16Hι/n": Runner(False, _fit_exact("apvi", failure_prob=FAILURE_PROB, lower_order=True)),
    "dp-apvi C2=0": Runner(True, lambda data, eps, rng: _fit_dp_apvi(data, eps, rng, C2=0.0)),
}


def learners_to_run(only=None) -> tuple[list[str], list[str]]:
    """(names run, registered tabular names without a runner here).

    Every registered tabular learner with a runner, plus the runners' learners not (yet) registered
    (DP-PBB is a library class before it is a ``--algo`` choice)."""
    tab = registry.names(family="tabular")
    run = [n for n in list(tab) + [n for n in LEARNERS if n not in tab]
           if n in LEARNERS and (only is None or n in only)]
    return run, [n for n in tab if n not in LEARNERS]


def one_run(name: str, data: Data, epsilon, rng, **meta) -> dict:
    """Fit ``name`` once; its exact value, certified value and whether the certificate held."""
    t = time.process_time()
    learner = LEARNERS[name].fit(data, epsilon, rng)
    cpu = time.process_time() - t
    value = evaluate_policy(data.mdp, learner.policy_.table)
    certified = learner.value_estimate(data.mdp.d0)
    return dict(meta, algo=name, epsilon=epsilon, value=float(value), certified=float(certified),
                held=bool(certified <= value + HELD_TOL), cpu_seconds=cpu)


def _say(row: dict) -> None:
    eps = "-" if row["epsilon"] is None else f"{row['epsilon']:g}"
    print(f"  [{row['study']}] n={row['n']:>8} {row['algo']:<16} eps={eps:<4} value={row['value']:.4f} "
          f"certified={row['certified']:.4f} held={row['held']} ({row['cpu_seconds']:.1f}s cpu)",
          file=sys.stderr, flush=True)


def fit_all(names, data: Data, eps_list, rng, **meta) -> list[dict]:
    """Every learner on one log: non-private ones once, private ones at each epsilon (child streams)."""
    rows = []
    streams = iter(rng.spawn(len(names) * max(1, len(eps_list))))
    for name in names:
        for eps in (eps_list if LEARNERS[name].private else [None]):
            rows.append(one_run(name, data, eps, next(streams), **meta))
            _say(rows[-1])
    return rows


# ----------------------------------------------------------------------------- part 1: ICU-Sepsis


def icu_study(args, names) -> list[dict]:
    mdp = load_icu_sepsis()
    spec = DomainSpec.from_dict(icu_sepsis_spec_doc())
    behaviour = clinicians_policy()
    rows = []
    for seed_idx, child in enumerate(np.random.default_rng(args.seed).spawn(args.seeds)):
        sim_rng, noise_rng = child.spawn(2)
        t = time.process_time()
        log = simulate(mdp, behaviour, max(args.stays), sim_rng)
        print(f"seed {seed_idx}: simulated {max(args.stays)} stays ({time.process_time() - t:.1f}s cpu)",
              file=sys.stderr, flush=True)
        for n, rng in zip(sorted(args.stays), noise_rng.spawn(len(args.stays))):
            data = Data.of(mdp, spec, log.filter(pl.col("episode_id") < n), stationary=True)
            rows += fit_all(names, data, args.eps, rng, study="icu", seed=seed_idx, n=n)
            del data
        if args.partial is not None:
            args.partial.write_text(json.dumps({"runs": rows}))
    return rows


# ----------------------------------------------------------------------------- part 2: coverage

#: The grid the coverage runs cycle through: (S, A, H, episodes); epsilon cycles separately.
COVERAGE_GRID = list(itertools.product((3, 6), (2, 3), (3, 5), (300, 3000, 30000)))
COVERAGE_EPS = (1.0, 5.0, 20.0)


def coverage_study(args, names) -> list[dict]:
    rows = []
    root = np.random.default_rng(args.seed + 1)
    for i, child in enumerate(root.spawn(args.coverage_runs)):
        S, A, H, n = COVERAGE_GRID[i % len(COVERAGE_GRID)]
        eps = COVERAGE_EPS[(i // len(COVERAGE_GRID)) % len(COVERAGE_EPS)]
        mdp = random_tabular_mdp(S, A, H, instance_seed=i)
        spec = DomainSpec.from_dict(random_tabular_spec_doc(mdp))
        sim_rng, rng = child.spawn(2)
        data = Data.of(mdp, spec, simulate(mdp, uniform_policy(mdp), n, sim_rng), stationary=False)
        rows += fit_all(names, data, [eps], rng, study="random", seed=i, n=n, S=S, A=A, H=H)
    return rows


# ----------------------------------------------------------------------------- tables and plot


def _label(algo: str, eps) -> str:
    return algo if eps is None else f"{algo} ε={eps:g}"


def coverage_table(rows: list[dict]) -> str:
    df = pl.DataFrame(rows, infer_schema_length=None)
    lines = ["| learner | study | runs | held | coverage | Clopper-Pearson 95% | target 1 - failure_prob | "
             "runs with certified > 0 |", "|---|---|---|---|---|---|---|---|"]
    for (algo, study), g in sorted(df.group_by(["algo", "study"]), key=lambda kv: kv[0]):
        n, k = g.height, int(g["held"].sum())
        lo, hi = float(cp_lower(k, n, 0.025)), float(cp_upper(k, n, 0.025))
        pos = int((g["certified"] > 0).sum())
        lines.append(f"| {algo} | {study} | {n} | {k} | {k / n:.3f} | [{lo:.3f}, {hi:.3f}] | "
                     f"{1 - FAILURE_PROB:.2f} | {pos} |")
    return "\n".join(lines)


def icu_table(rows: list[dict]) -> str:
    df = pl.DataFrame([r for r in rows if r["study"] == "icu"], infer_schema_length=None)
    if df.height == 0:
        return "(no ICU-Sepsis run)"
    ns = sorted(df["n"].unique().to_list())
    head = "| learner | " + " | ".join(f"{n:,} stays: value / certified / held" for n in ns) + " |"
    lines = [head, "|---|" + "---|" * len(ns)]
    keys = df.select("algo", "epsilon").unique().sort(["algo", "epsilon"], nulls_last=False).rows()
    for algo, eps in keys:
        sel = df.filter((pl.col("algo") == algo)
                        & (pl.col("epsilon").is_null() if eps is None else pl.col("epsilon") == eps))
        cells = []
        for n in ns:
            g = sel.filter(pl.col("n") == n)
            if g.height == 0:
                cells.append("–")
                continue
            v, c = g["value"].to_numpy(), g["certified"].to_numpy()
            sd = v.std(ddof=1) if v.size > 1 else 0.0
            cells.append(f"{v.mean():.4f} ± {sd:.4f} / {c.mean():.4f} / {int(g['held'].sum())}/{g.height}")
        lines.append(f"| {_label(algo, eps)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Three panels: ICU exact values, ICU certified values (bars per learner and stays), coverage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = pl.DataFrame(rows, infer_schema_length=None)
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2), gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    icu = df.filter(pl.col("study") == "icu")
    colours = plt.get_cmap("tab20").colors
    if icu.height:
        ns = sorted(icu["n"].unique().to_list())
        keys = icu.select("algo", "epsilon").unique().sort(["algo", "epsilon"], nulls_last=False).rows()
        width = 0.84 / max(len(keys), 1)
        for j, (algo, eps) in enumerate(keys):
            sel = icu.filter((pl.col("algo") == algo)
                             & (pl.col("epsilon").is_null() if eps is None else pl.col("epsilon") == eps))
            x = np.arange(len(ns)) + (j - (len(keys) - 1) / 2) * width
            for ax, col in zip(axes[:2], ("value", "certified")):
                m = [sel.filter(pl.col("n") == n)[col].mean() for n in ns]
                ax.bar(x, [np.nan if v is None else v for v in m], width, color=colours[j % len(colours)],
                       label=_label(algo, eps) if col == "value" else None)
        for ax in axes[:2]:
            ax.set_xticks(np.arange(len(ns)), [f"{n:,} stays" for n in ns])
            ax.grid(axis="y", alpha=0.3)
        ax = axes[0]
        ax.axhline(REFERENCE_VALUES["clinicians"], color="gray", ls=":", label="clinicians 0.6920")
        ax.axhline(0.7056, color="gray", ls="--", lw=0.8, label="imitation tie-break 0.7056")
        ax.axhline(REFERENCE_VALUES["optimal"], color="k", ls="-.", label="optimal 0.7922")
        ax.set_ylim(0.68, 0.80)
        ax.set_ylabel("exact value of the learned policy")
        ax.set_title("ICU-Sepsis (H = 20): exact value, mean over seeds")
        axes[1].set_ylim(0, 1)
        axes[1].set_ylabel("certified value d0·V̂_0 (declared units)")
        axes[1].set_title("certified value (must stay below the exact value)")
        fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=6, fontsize=8, frameon=False)
    ax = axes[2]
    algos = sorted(df["algo"].unique().to_list())
    for k, study in enumerate(("random", "icu")):
        for j, algo in enumerate(algos):
            g = df.filter((pl.col("algo") == algo) & (pl.col("study") == study))
            if g.height == 0:
                continue
            n, held = g.height, int(g["held"].sum())
            lo, hi = float(cp_lower(held, n, 0.025)), float(cp_upper(held, n, 0.025))
            y = j + (0.15 if k else -0.15)
            ax.errorbar([held / n], [y], xerr=[[held / n - lo], [hi - held / n]], fmt="o" if k == 0 else "s",
                        color=f"C{k}", capsize=3,
                        label=("random tabular MDPs" if k == 0 else "ICU-Sepsis") if j == 0 else None)
            ax.annotate(f"{held}/{n}", (hi, y), xytext=(4, -3), textcoords="offset points", fontsize=7)
    ax.axvline(1 - FAILURE_PROB, color="r", ls="--", label=f"1 - failure_prob = {1 - FAILURE_PROB:.2f}")
    ax.set_yticks(range(len(algos)), algos)
    ax.set_xlim(-0.02, 1.15)
    ax.set_xlabel("coverage: runs with certified <= exact value\n(Clopper-Pearson 95%)")
    ax.set_title("Does the certificate hold?")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- entry point


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=["all", "icu", "coverage", "report"], default="all",
                   help="report: run nothing, only the tables and plot of the --merge inputs")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--stays", type=int, nargs="+", default=[200_000, 1_000_000])
    p.add_argument("--eps", type=float, nargs="+", default=[1.0, 5.0, 20.0])
    p.add_argument("--coverage-runs", type=int, default=240)
    p.add_argument("--learners", nargs="+", default=None, help="only these registered learners")
    p.add_argument("--seed", type=int, default=2026, help="root seed of the experiment (simulated data only)")
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "utility_icu_learners.png")
    p.add_argument("--merge", type=Path, nargs="*", default=[],
                   help="also include the runs of these earlier JSON outputs (e.g. the other part)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.partial = args.out / f"utility_icu_learners.{args.part}.partial.json"
    names, skipped = learners_to_run(args.learners)
    print(f"learners: {', '.join(names)}" + (f"; registered but without a runner here: {', '.join(skipped)}"
                                             if skipped else ""), file=sys.stderr)
    t0 = time.process_time()
    rows = []
    if args.part in ("all", "coverage"):
        rows += coverage_study(args, names)
    if args.part in ("all", "icu"):
        rows += icu_study(args, names)
    cpu = time.process_time() - t0
    merged_meta = []
    for extra in args.merge:
        doc = json.loads(extra.read_text())
        rows += doc["runs"]
        merged_meta.append(doc.get("meta", {}))
    meta = dict(part=args.part, seed=args.seed, seeds=args.seeds, stays=args.stays, eps=args.eps,
                coverage_runs=args.coverage_runs, coverage_grid=COVERAGE_GRID, coverage_eps=COVERAGE_EPS,
                dp_delta=DP_DELTA, failure_prob=FAILURE_PROB, learners=names, skipped=skipped,
                cpu_seconds=cpu, peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                merged=[str(m) for m in args.merge], merged_meta=merged_meta)
    stem = ("utility_icu_learners" if args.part in ("all", "report") or args.merge
            else f"utility_icu_learners_{args.part}")
    (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "runs": rows}, separators=(",", ":")) + "\n")
    text = (f"<!-- generated by experiments/utility_icu_learners.py ({json.dumps(meta)}) -->\n\n"
            "### ICU-Sepsis: exact value (mean ± sd over seeds) / certified value (mean) / certificates held\n\n"
            + icu_table(rows) + "\n\n### Coverage of the certificate\n\n" + coverage_table(rows) + "\n")
    (args.out / f"{stem}.md").write_text(text)
    plot(rows, args.plot if stem == "utility_icu_learners" else args.plot.with_name(f"{stem}.png"))
    print(text)
    print(f"cpu {cpu:.0f}s, peak RSS {meta['peak_rss_mb']:.0f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
