"""Reproduce Sahu (2025)'s Figure 1: regret of the linear explorers on the synthetic linear MDP.

(a) LSVI-UCB, Luyo et al., Ngo et al., LSVI-UCB++ and DP-LSVI-UCB++ at one
budget (eps = 5, delta = 1e-5, converted to rho exactly): cumulative regret on
log-log axes and regret per user (mean over the users between two checkpoints)
on a log x axis; (b) regret per user over the last 10% of the users and the
final cumulative regret against eps in {0.5, 1, 2, 5, 10} (delta = 1e-5) for the
three private algorithms, with the non-private LSVI-UCB and LSVI-UCB++ as
horizontal lines. Both panels draw three reference levels computed exactly from
the MDP (``privaudit.mdp.tabular.reference_regrets``): uniform play, always
action 0, and the reward-greedy policy argmax_a r_h(s, a). **Every algorithm is
given the public reward function** (``make_linear_agent(..., reward_to_all=True)``:
Q = r + w^T phi + bonus, w regressing V_{h+1} alone, as the ++ algorithms do);
the format-1 runs (``<constants>/K<K>/``) gave it to the ++ algorithms only. The paper's MDP
(the synthetic linear MDP of Min et al. 2021 as Qiao & Wang 2023 describe it in
their appendix "Details for the Evaluation part"; instance seed 0, H = 20) with phi scaled by 1/sqrt(7)
(||phi|| <= 1, as issue 16 asks); users are the project's response trees
(``privaudit.online.env``), seed r uses world key r (fresh users) and agent
noise seed 1000 + r. Mean and standard error over the seeds that exist.

The paper's figure has no readable numbers and does not state K, the budget
of panel (a) or its constants; the claims to check are "DP-LSVI-UCB++ beats
Ngo and Luyo and even non-private LSVI-UCB, and approaches LSVI-UCB++ as the
budget grows" (Sahu 2025, Section 4, "Key Takeaways").

Resumable: every run (constants, K, algorithm, epsilon, seed) is its own small
JSON file ``<results>/figure1/<constants>/K<K>-reward-all/<algo>_eps<eps|none>_seed<r>.json``
(format version 2), written atomically when the run finishes; a rerun skips
the runs whose file exists, so later sessions add seeds. A run shared by both
panels is stored once. Runs are started in priority order: panel (a) for every
seed, then panel (b), and the figures are assembled from whatever files exist,
each curve labelled with its number of seeds.

Usage::

    python experiments/figure1_dp_lsvi_ucb_pp.py run [--episodes 100000] [--seeds 0 1 2]
        [--constants practical] [--panels a b] [--algos ...] [--workers 1]
    python experiments/figure1_dp_lsvi_ucb_pp.py plot [--episodes 100000] [--constants practical]
        [--out-dir docs/img]

``run`` runs the missing runs (then plots); ``plot`` only assembles the
figures (``docs/img/figure1{a,b}_<constants>_K<K>.png``) and prints a Markdown
table of the final cumulative regret and of the regret per user over the last 10%. A run in progress saves its curve so far
every K/20 users (``<run>.partial.json``); a curve without any finished run is
drawn dashed from those, up to where it got, and labelled so.

Every process (the script and its pool workers) uses one BLAS thread
(``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` = 1 unless
already set): the arrays are tiny, and more threads cost CPU without speed.
"""

from __future__ import annotations

import os

# One BLAS thread per process, set before numpy is imported (the ProcessPool's children inherit it):
# the explorers' arrays are tiny (d = 10), so BLAS threads only add overhead and contention on the
# 2-core machine (DP-LSVI-UCB++: 2.26 ms per user with one thread against 2.74 ms with the default).
# An explicit setting in the environment is kept.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402  (after the thread settings, before numpy)
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from privaudit.mdp.synthetic_linear import raw_features  # noqa: E402
from privaudit.mdp.tabular import reference_regrets  # noqa: E402
from privaudit.online.env import make_env  # noqa: E402
from privaudit.online.linear.build import LINEAR_ALGOS, make_linear_agent  # noqa: E402
from privaudit.online.protocol import run_episodes  # noqa: E402
from privaudit.privacy.accounting import dp_to_zcdp  # noqa: E402

EPS_PANEL_A = 5.0
EPS_PANEL_B = (0.5, 1.0, 2.0, 5.0, 10.0)
DELTA = 1e-5
PHI = raw_features() / math.sqrt(7.0)
LABELS = {"lsvi-ucb": "LSVI-UCB", "luyo": "Luyo et al.", "ngo": "Ngo et al.", "lsvi-ucb-pp": "LSVI-UCB++",
          "dp-lsvi-ucb-pp": "DP-LSVI-UCB++"}
#: One colour per algorithm, the same in both panels.
COLORS = {"lsvi-ucb": "C0", "luyo": "C1", "ngo": "C2", "lsvi-ucb-pp": "C3", "dp-lsvi-ucb-pp": "C4"}
#: The reference policies of ``reference_regrets``: label and line style.
REFERENCES = {"uniform": ("uniform play", (0, (4, 2))), "action0": ("always action 0", (0, (1, 1))),
              "reward_greedy": ("reward-greedy argmax_a r(s, a)", (0, (6, 2, 1, 2)))}
FORMAT_VERSION = 2
RESULTS = Path(__file__).resolve().parent / "results" / "figure1"


def checkpoints(K: int) -> np.ndarray:
    """About 60 log-spaced episode counts 1..K where the cumulative regret is kept."""
    return np.unique(np.round(np.logspace(0, math.log10(K), 60)).astype(int))


def panel_keys(panel: str) -> list[tuple[str, float | None]]:
    """(algorithm, epsilon or None) of the curves of one panel, in plotting order."""
    if panel == "a":
        return [(a, EPS_PANEL_A if LINEAR_ALGOS[a] else None) for a in LABELS]
    if panel == "b":
        return ([("lsvi-ucb", None), ("lsvi-ucb-pp", None)]
                + [(a, e) for a in ("luyo", "ngo", "dp-lsvi-ucb-pp") for e in EPS_PANEL_B])
    raise ValueError(f"`panel` must be 'a' or 'b'. Got {panel!r}.")


def run_path(root: Path, constants: str, K: int, algo: str, eps: float | None, seed: int) -> Path:
    """File of one run (see the module docstring)."""
    tag = "none" if eps is None else f"{eps:g}"
    return root / constants / f"K{K}-reward-all" / f"{algo}_eps{tag}_seed{seed}.json"


#: A run is played in this many chunks; after each one the curve so far is saved as a partial file.
CHUNKS = 20


def _write(path: Path, rec: dict) -> None:
    """Write ``rec`` as JSON atomically (a killed run leaves no half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1) + "\n")
    os.replace(tmp, path)


def partial_path(path: Path) -> Path:
    """Where an unfinished run keeps its curve so far (removed when the run finishes)."""
    return path.with_name(path.stem + ".partial.json")


def one_run(job: tuple) -> dict:
    """Run one (algorithm, epsilon, seed, K, constants) and write its file; returns the record.

    The K users are played in :data:`CHUNKS` consecutive chunks (``run_episodes`` with
    ``first_user``: the same run as one call); after each chunk the cumulative regret at the
    checkpoints reached so far is written to a partial file, so that a run stopped early (the
    machine is shared) still shows its curve up to where it got. A rerun starts a stopped run
    from the beginning.
    """
    algo, eps, seed, K, constants, path = job
    path = Path(path)
    env = make_env("synthetic-linear", world_key=seed)
    reward = np.stack([env.mdp.expected_reward(h) for h in range(env.horizon)])
    rho = dp_to_zcdp(eps, DELTA) if (LINEAR_ALGOS[algo] and eps is not None) else math.inf
    agent = make_linear_agent(algo, PHI, reward, env.horizon, K, rho=rho, delta=DELTA, constants=constants,
                              rng=np.random.default_rng(1000 + seed), reward_to_all=True)
    t0, c0 = time.perf_counter(), time.process_time()
    cps = checkpoints(K)
    rec = {"format_version": FORMAT_VERSION, "experiment": "figure1", "constants": constants, "episodes": K,
           "algo": algo, "epsilon": eps, "delta": DELTA if eps is not None else None,
           "rho": None if math.isinf(rho) else rho, "seed": seed, "world_key": seed, "noise_seed": 1000 + seed,
           "reward_known": "all"}
    regret = np.empty(K)
    bounds = np.linspace(0, K, CHUNKS + 1).round().astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):
        regret[a:b] = run_episodes(env, agent, int(b - a), first_user=int(a)).regret
        cum = np.cumsum(regret[:b])
        done = cps[cps <= b]
        rec.update({"episodes_done": int(b), "checkpoints": done.tolist(),
                    "cumulative_regret": cum[done - 1].tolist(), "switches": int(agent.n_switches),
                    "cpu_seconds": time.process_time() - c0, "wall_seconds": time.perf_counter() - t0,
                    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
        if b < K:
            _write(partial_path(path), rec)
    tenth = max(K // 10, 1)
    rec.update({"first10_mean_regret": float(regret[:tenth].mean()), "last10_mean_regret": float(regret[-tenth:].mean())})
    _write(path, rec)
    partial_path(path).unlink(missing_ok=True)
    return rec


def pending_jobs(root: Path, K: int, seeds, constants: str, panels, algos=None, epsilons=None) -> list[tuple]:
    """Missing runs in priority order: panel (a) for each seed, then panel (b) for each seed.

    ``algos`` / ``epsilons``: only these algorithms / budgets (a non-private run has no budget and is
    kept by an epsilon filter).
    """
    jobs, seen = [], set()
    for panel in panels:
        for seed in seeds:
            for algo, eps in panel_keys(panel):
                if (algos and algo not in algos) or (epsilons and eps is not None and eps not in epsilons):
                    continue
                p = run_path(root, constants, K, algo, eps, seed)
                if p in seen or p.exists():
                    continue
                seen.add(p)
                jobs.append((algo, eps, seed, K, constants, str(p)))
    return jobs


def load(root: Path, constants: str, K: int, partial: bool = False) -> dict:
    """{(algo, eps): [records sorted by seed]} of every finished run (``partial=True``: of the unfinished ones)."""
    out: dict = {}
    for p in sorted((root / constants / f"K{K}-reward-all").glob("*.json")):
        if p.name.endswith(".partial.json") != partial:
            continue
        rec = json.loads(p.read_text())
        if rec.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{p}: unknown format_version {rec.get('format_version')!r}; expected {FORMAT_VERSION}.")
        out.setdefault((rec["algo"], rec["epsilon"]), []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r["seed"])
    return out


def summary(recs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error (0 for a single seed) of the cumulative regret curves (cut to the shortest)."""
    n = min(len(r["cumulative_regret"]) for r in recs)
    c = np.asarray([r["cumulative_regret"][:n] for r in recs])
    se = c.std(axis=0, ddof=1) / math.sqrt(len(c)) if len(c) > 1 else np.zeros(c.shape[1])
    return c.mean(axis=0), se


def curve_label(algo: str, eps: float | None, recs: list[dict], K: int, last_k: int | None = None) -> str:
    """Legend text; an unfinished curve names the last episode it is drawn to (``last_k``, its last saved
    checkpoint), not how far the run got before it stopped."""
    n, done = len(recs), min(r.get("episodes_done", K) for r in recs)
    part = "" if done >= K else f", unfinished: drawn to k = {last_k if last_k is not None else done:,}"
    return LABELS[algo] + ("" if eps is None else f" (eps={eps:g})") + f", {n} seed{'s' if n > 1 else ''}{part}"


def references() -> dict[str, float]:
    """Expected regret per user of the reference policies on the Figure-1 MDP (exact, from the MDP)."""
    return reference_regrets(make_env("synthetic-linear", world_key=0).mdp)


def per_user(x: np.ndarray, cum: np.ndarray, step: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Mean regret per user between every ``step``-th checkpoint: (geometric mid-points, means)."""
    idx = np.arange(0, len(cum), step)
    if idx[-1] != len(cum) - 1:
        idx = np.append(idx, len(cum) - 1)
    xs, cs = x[idx], cum[idx]
    return np.sqrt(xs[1:] * (xs[:-1] + 1)), np.diff(cs) / np.diff(xs)


def _draw_references(ax, refs: dict, cumulative_at=None) -> None:
    """Grey reference lines: levels per user, or ``level * k`` over ``cumulative_at`` (k values)."""
    for name, (label, style) in REFERENCES.items():
        lab = f"{label}: {refs[name]:.3g} / user"
        if cumulative_at is None:
            ax.axhline(refs[name], color="0.45", lw=1, ls=style, label=lab)
        else:
            ax.plot(cumulative_at, refs[name] * cumulative_at, color="0.45", lw=1, ls=style, label=lab)


def plot(runs: dict, constants: str, K: int, out_dir: Path, partial: dict | None = None) -> list[Path]:
    """Panel (a): cumulative regret (log-log) and regret per user (log x) of the five algorithms at
    eps = 5; panel (b): regret per user over the last 10% of the users and final cumulative regret
    against eps. Mean +- s.e. over the seeds; reference levels from :func:`references`.

    Finished runs are drawn solid; a curve of panel (a) with no finished run is drawn dashed from the
    unfinished runs' partial files, up to where they got. Panel (b) uses finished runs only.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    partial = partial or {}
    refs = references()
    x = checkpoints(K)
    paths = []
    sub = f"H = 20, K = {K:,}, {constants} constants, reward function given to every algorithm"
    keys = [k for k in panel_keys("a") if k in runs or k in partial]
    if keys:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
        for algo, eps in keys:
            recs = runs.get((algo, eps)) or partial[(algo, eps)]
            m, se = summary(recs)
            style, color = ("-" if (algo, eps) in runs else "--"), COLORS[algo]
            label = curve_label(algo, eps, recs, K, int(x[len(m) - 1]))
            ax.plot(x[:len(m)], m, style, lw=1.5, color=color, label=label)
            ax.fill_between(x[:len(m)], np.maximum(m - se, 1e-3), m + se, alpha=0.2, color=color)
            px, py = per_user(x[:len(m)], m)
            ax2.plot(px, py, style, marker=".", lw=1.2, color=color, label=label)
        _draw_references(ax, refs, x.astype(float))
        _draw_references(ax2, refs)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(bottom=max(0.5 * min(refs.values()), 1e-2))
        ax2.set_xscale("log")
        ax2.set_ylim(0, 1.05 * max(refs.values()))
        ax.set_ylabel("cumulative regret (log)")
        ax2.set_ylabel("regret per user (mean between checkpoints)")
        for a_ in (ax, ax2):
            a_.set_xlabel("users k (log)")
            a_.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="upper left")
        fig.suptitle(f"(a) algorithms at eps = {EPS_PANEL_A:g}, delta = 1e-5; {sub}; mean +- s.e. over seeds",
                     fontsize=9)
        fig.tight_layout()
        p = out_dir / f"figure1a_{constants}_K{K}.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        paths.append(p)
    private = [a for a in ("luyo", "ngo", "dp-lsvi-ucb-pp") if any((a, e) in runs for e in EPS_PANEL_B)]
    if private:
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
        for field, a_ in (("last10_mean_regret", ax), ("cumulative", ax2)):
            def value(r, field=field):
                return r["cumulative_regret"][-1] if field == "cumulative" else r[field]
            scale = K if field == "cumulative" else 1.0
            for algo in private:
                es = [e for e in EPS_PANEL_B if (algo, e) in runs]
                vals = [[value(r) for r in runs[(algo, e)]] for e in es]
                m = np.array([np.mean(v) for v in vals])
                se = np.array([np.std(v, ddof=1) / math.sqrt(len(v)) if len(v) > 1 else 0.0 for v in vals])
                n = min(len(v) for v in vals)
                a_.errorbar(es, m, yerr=se, marker="o", capsize=3, color=COLORS[algo],
                            label=f"{LABELS[algo]}, {n}+ seeds")
            for algo in ("lsvi-ucb", "lsvi-ucb-pp"):
                if (algo, None) in runs:
                    v = np.mean([value(r) for r in runs[(algo, None)]])
                    a_.axhline(v, color=COLORS[algo], lw=1.5, label=f"{LABELS[algo]} (non-private): {v:,.3g}")
            for name, (label, style) in REFERENCES.items():
                a_.axhline(refs[name] * scale, color="0.45", lw=1, ls=style,
                           label=f"{label}: {refs[name] * scale:,.3g}")
            a_.set_xscale("log")
            a_.set_xticks(EPS_PANEL_B, [f"{e:g}" for e in EPS_PANEL_B])
            a_.set_xlabel("epsilon (delta = 1e-5)")
            a_.set_ylim(0, 1.05 * max(refs.values()) * scale)
            a_.grid(alpha=0.3)
        ax.set_ylabel("regret per user, last 10% of the users")
        ax2.set_ylabel(f"cumulative regret after K = {K:,} users")
        ax.legend(fontsize=7)
        fig.suptitle(f"(b) final regret against the budget; {sub}; mean +- s.e. over seeds", fontsize=9)
        fig.tight_layout()
        p = out_dir / f"figure1b_{constants}_K{K}.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        paths.append(p)
    return paths


def table(runs: dict, K: int, partial: dict | None = None) -> str:
    """Markdown table: cumulative regret (mean +- s.e.) at the last checkpoint every curve reached
    (comparable across curves) and at the curve's own last one, per seed, switches, CPU s per run."""
    order = list(dict.fromkeys(panel_keys("a") + panel_keys("b")))
    curves = [(key, src[key]) for src in (runs, partial or {}) for key in order if key in src]
    if not curves:
        return "(no runs)"
    n_common = min(len(summary(recs)[0]) for _, recs in curves)
    k_common = checkpoints(K)[n_common - 1]
    rows = [f"| algorithm | eps | seeds | regret at k = {k_common:,} | users reached k | regret at k | per seed at k "
            f"| per user, last 10% | mean switches | CPU s / run |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key, recs in curves:
        m, se = summary(recs)
        k_done = min(r.get("episodes_done", K) for r in recs)
        k_at = checkpoints(K)[len(m) - 1]
        per = ", ".join(f"{r['cumulative_regret'][len(m) - 1]:,.0f} (s{r['seed']})" for r in recs)
        rows.append(f"| {LABELS[key[0]]} | {'-' if key[1] is None else f'{key[1]:g}'} | {len(recs)} | "
                    f"{m[n_common - 1]:,.0f} +- {se[n_common - 1]:,.0f} | "
                    f"{k_at:,}{'' if k_done >= K else ' (unfinished)'} | {m[-1]:,.0f} +- {se[-1]:,.0f} | {per} | "
                    f"{_last10(recs)} | {np.mean([r['switches'] for r in recs]):,.0f} | "
                    f"{np.mean([r['cpu_seconds'] for r in recs]):.0f} |")
    return "\n".join(rows)


def _last10(recs: list[dict]) -> str:
    """Mean +- s.e. over the seeds of the regret per user over the last 10% of the users ('-' if unfinished)."""
    v = [r["last10_mean_regret"] for r in recs if "last10_mean_regret" in r]
    if len(v) < len(recs):
        return "-"
    se = np.std(v, ddof=1) / math.sqrt(len(v)) if len(v) > 1 else 0.0
    return f"{np.mean(v):.3f} +- {se:.3f}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["run", "plot"])
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    ap.add_argument("--constants", choices=["practical", "theory"], default="practical")
    ap.add_argument("--panels", nargs="+", choices=["a", "b"], default=["a", "b"])
    ap.add_argument("--algos", nargs="+", choices=list(LABELS), default=None, help="only these algorithms")
    ap.add_argument("--eps", type=float, nargs="+", default=None, help="only these budgets")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--results", default=str(RESULTS))
    ap.add_argument("--out-dir", default="docs/img")
    args = ap.parse_args(argv)
    root, K = Path(args.results), args.episodes
    if args.command == "run":
        jobs = pending_jobs(root, K, args.seeds, args.constants, args.panels, args.algos, args.eps)
        print(f"{len(jobs)} runs to do", flush=True)
        with ProcessPoolExecutor(max_workers=args.workers, max_tasks_per_child=1) as ex:
            for rec in ex.map(one_run, jobs):
                eps = "" if rec["epsilon"] is None else f" eps={rec['epsilon']:g}"
                print(f"  {rec['algo']}{eps} seed {rec['seed']}: regret {rec['cumulative_regret'][-1]:.0f}, "
                      f"switches {rec['switches']}, {rec['cpu_seconds']:.0f} CPU s", flush=True)
    runs = load(root, args.constants, K)
    partial = {k: v for k, v in load(root, args.constants, K, partial=True).items() if k not in runs}
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for p in plot(runs, args.constants, K, out_dir, partial):
        print(f"wrote {p}")
    print(table(runs, K, partial))


if __name__ == "__main__":
    main()
