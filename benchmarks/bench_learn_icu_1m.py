"""Learning at the ICU-Sepsis shape from 1M stays, end to end from Parquet: CPU time and peak RSS.

Goal (issue 12, "Benchmark"): at most 60 s of CPU and 2 GB of peak resident
memory on 2 cores, from the Parquet logs to the learned policy.

    nice -n 10 python benchmarks/bench_learn_icu_1m.py               # simulates the logs (then deletes them)
    nice -n 10 python benchmarks/bench_learn_icu_1m.py --logs /tmp/icu_1m.parquet   # simulated once, kept
    nice -n 10 python benchmarks/bench_learn_icu_1m.py --logs /tmp/icu_1m.parquet --cli
    nice -n 10 python benchmarks/bench_learn_icu_1m.py --logs /tmp/icu_1m.parquet --algo dp-apvi

Setup (not measured): 1,000,000 stays simulated from ICU-Sepsis with the
clinicians' policy (``privaudit.mdp.simulate``, seed 2026), written to one
Parquet file with the bundled spec (``sample_data/icu_sepsis_spec.json``:
S = 716, A = 25, H = 20, k = 1, return bound [0, 1]).

Measured: one child process (``POLARS_MAX_THREADS=2``, pinned to 2 cores with
``taskset`` when available) that imports privaudit and runs the learner end
to end: validate and bound the logs (``prepare_logs``: every fatal rule, keep
k, truncate at H, clip rewards and returns), then

* ``dp-pbb`` (the issue-12 learner): cap c steps per unit and (s, a) cell
  (``PreparedLogs.with_cell_cap``), exact capped counts, ``DPPBB.fit`` with
  the (epsilon, 1e-6) budget (its own noisy releases), the policy;
* ``dp-apvi``: exact pooled counts, the release's noise on every cell
  (``TabularRelease.apply``: 12.8 M transition cells), ``DPAPVI.fit``.

With ``--cli`` the child is the command a data holder runs instead,
``privaudit train LOGS --spec SPEC --algo dp-pbb --epsilon 5 --delta 1e-6
--out DIR`` (same steps, plus writing the policy folder and its local log).

The parent reads the child's CPU time (user + system, all threads) and
peak RSS from ``getrusage(RUSAGE_CHILDREN)`` and prints them with the
child's own stage times. Nothing is written but the temporary logs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "sample_data" / "icu_sepsis_spec.json"
CPU_BUDGET_S = 60.0
RSS_BUDGET_MB = 2048.0


def make_logs(path: Path, stays: int, seed: int) -> None:
    """Simulate ``stays`` clinicians' stays of ICU-Sepsis and write them as Parquet (setup, not measured)."""
    import numpy as np

    from privaudit.mdp.icu_sepsis import clinicians_policy, load_icu_sepsis
    from privaudit.mdp.simulate import simulate, write_logs

    df = simulate(load_icu_sepsis(), clinicians_policy(), stays, np.random.default_rng(seed))
    write_logs(df.with_columns(df["episode_id"].alias("unit_id")), path)


def child(logs: str, algo: str, epsilon: float, max_per_cell: int) -> None:
    """The measured work: Parquet logs -> policy, one algorithm. Prints stage times as JSON."""
    t0 = time.process_time()
    stages = {}

    def mark(name):
        nonlocal t0
        now = time.process_time()
        stages[name] = round(now - t0, 2)
        t0 = now

    import numpy as np

    from privaudit.data.prepare import prepare_logs
    from privaudit.mdp.icu_sepsis import load_icu_sepsis
    from privaudit.mdp.tabular import evaluate_policy
    from privaudit.privacy.budget import resolve_budget
    from privaudit.core.spec import load_spec
    from privaudit.data.counts import sparse_counts
    mark("import")
    spec = load_spec(SPEC)
    budget = resolve_budget(epsilon=epsilon, delta=1e-6, mechanism="gaussian")
    prepared = prepare_logs(logs, spec)
    mark("validate_and_bound")
    rng = np.random.default_rng()
    if algo == "dp-pbb":
        from privaudit.learners.tabular.dp_pbb import DPPBB
        from privaudit.learners.tabular.pbb_counts import CappedCounts

        capped = prepared.with_cell_cap(max_per_cell, stationary=True)
        exact = sparse_counts(capped.bounded, spec, stationary=True, rewards=False)
        counts = CappedCounts.from_sparse(exact, starts=None, max_episodes=spec.max_episodes_per_unit,
                                          max_per_cell=max_per_cell, unit_column=spec.unit_file_column)
        del exact, capped
        mark("cap_and_count")
        learner = DPPBB().fit(counts, spec.public_reward_scaled(), terminal_states=spec.terminal_states,
                              reward_range=spec.reward_range, return_bound=spec.return_bound[1],
                              budget=budget, rng=rng)
    else:
        from privaudit.learners.tabular.dp_apvi import DPAPVI
        from privaudit.learners.tabular.counts import TabularCounts
        from privaudit.release.mechanism import TabularRelease

        exact = sparse_counts(prepared.bounded, spec, stationary=True, rewards=False)
        mark("count")
        release = TabularRelease.plan(spec, budget, stationary=True)
        noisy = release.apply(exact, rng=rng)
        trans = dict(noisy.transitions)[0]
        counts = TabularCounts(visits=noisy.visits, transitions=lambda h: trans, horizon=spec.H,
                               stationary=True, noisy=True)
        del exact
        mark("noise")
        learner = DPAPVI(noise_bound=release.noise_bound(0.05)).fit(
            counts, spec.public_reward_scaled(), terminal_states=spec.terminal_states,
            reward_range=spec.reward_range)
    table = learner.policy_.table
    mark("learn")
    # not part of the task, reported for context: the exact value needs the MDP (not measured above)
    value = evaluate_policy(load_icu_sepsis(), table)
    print(json.dumps({"stages_cpu_s": stages, "value": value}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=Path, default=None,
                    help="Parquet logs; simulated there (and kept) when the file does not exist. "
                         "Default: simulated to a temporary file, deleted afterwards")
    ap.add_argument("--stays", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--algo", choices=["dp-pbb", "dp-apvi"], default="dp-pbb")
    ap.add_argument("--epsilon", type=float, default=5.0)
    ap.add_argument("--max-per-cell", type=int, default=1)
    ap.add_argument("--cli", action="store_true", help="measure `privaudit train` instead (dp-pbb only)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(str(args.logs), args.algo, args.epsilon, args.max_per_cell)
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench_learn_"))
    keep = args.logs is not None
    args.logs = args.logs or tmp / "icu_1m.parquet"
    if not args.logs.exists():
        t = time.perf_counter()
        make_logs(args.logs, args.stays, args.seed)
        print(f"setup: simulated {args.stays:,} stays to {args.logs} ({time.perf_counter() - t:.0f} s wall, "
              f"{args.logs.stat().st_size / 2**20:.0f} MiB)", file=sys.stderr)
    try:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--logs", str(args.logs),
               "--algo", args.algo, "--epsilon", str(args.epsilon), "--max-per-cell", str(args.max_per_cell)]
        if args.cli:
            if args.algo != "dp-pbb":
                raise SystemExit("--cli measures `privaudit train --algo dp-pbb` only")
            cmd = [sys.executable, "-c", "from privaudit.cli import main; main()", "train", str(args.logs),
                   "--spec", str(SPEC), "--algo", "dp-pbb", "--epsilon", str(args.epsilon), "--delta", "1e-6",
                   "--max-per-cell", str(args.max_per_cell), "--out", str(tmp / "policy")]
        if shutil.which("taskset") and os.cpu_count() and os.cpu_count() >= 2:
            cmd = ["taskset", "-c", "0,1"] + cmd
        env = dict(os.environ, POLARS_MAX_THREADS="2", OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2",
                   PYTHONPATH=str(ROOT))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if out.returncode != 0:
            print(out.stderr, file=sys.stderr)
            raise SystemExit(f"child failed with exit code {out.returncode}")
        res = ({"stages_cpu_s": "(privaudit train: not split)", "value": None} if args.cli
               else json.loads(out.stdout.strip().splitlines()[-1]))
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        rss_mb = after.ru_maxrss / 1024  # Linux: KiB; the largest child so far (only this one)
        print(("privaudit train --algo " if args.cli else "") + f"{args.algo}, {args.stays:,} stays, "
              f"epsilon {args.epsilon:g}, delta 1e-6"
              + (f", c = {args.max_per_cell}" if args.algo == "dp-pbb" else "") + ":")
        print(f"  CPU {cpu:.1f} s (budget {CPU_BUDGET_S:.0f} s), peak RSS {rss_mb:.0f} MB "
              f"(budget {RSS_BUDGET_MB:.0f} MB), wall {wall:.1f} s on a shared machine")
        print(f"  stages (child CPU s): {res['stages_cpu_s']}")
        if res["value"] is not None:
            print(f"  exact value of the policy: {res['value']:.4f} (context, not measured)")
        print(f"  within budget: {cpu <= CPU_BUDGET_S and rss_mb <= RSS_BUDGET_MB}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if not keep:
            args.logs.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
