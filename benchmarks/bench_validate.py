"""Benchmark of ``privaudit validate``: rows per second and peak resident memory.

Makes a log of about ``--rows`` rows (default 10 million) once, cached in
``--workdir``, then validates it in a fresh subprocess per repeat and prints
the wall time of ``validate_logs`` (in the child), rows per second, the
CPU time (user + system: less sensitive to other load on a shared machine) and the
child's peak resident set size (``resource.getrusage(RUSAGE_SELF)`` in the
child, interpreter and imports included).

Sources of the log:

- ``simulate`` (default): ``privaudit simulate icu-sepsis`` with the
  clinicians' policy (about 8.1 rows per episode, so rows/8.1 episodes);
  the figure of the issue.
- ``synthetic``: valid random episodes of length 1..H written directly with
  numpy (no simulator needed), H=20, S=716, A=25.
- ``--logs PATH --spec SPEC``: an existing log.

Targets (issue 2): above 5 M rows/s on 2 cores, peak RSS below 1 GB.
Run: ``python benchmarks/bench_validate.py [--rows 10000000] [--repeats 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = """
import json, resource, sys, time
from privaudit.data.validate import validate_logs
from privaudit.core.spec import load_spec
spec = load_spec(sys.argv[2])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t, c = time.perf_counter(), cpu()
rep = validate_logs(sys.argv[1], spec)
dt, dc = time.perf_counter() - t, cpu() - c
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
print(json.dumps({"seconds": dt, "cpu_seconds": dc, "rows": rep.rows, "episodes": rep.episodes, "ok": rep.ok, "peak_rss_mib": peak}))
"""


def make_synthetic(path: Path, spec_path: Path, rows: int, seed: int) -> None:
    """Write a valid log of exactly ``rows`` rows (episodes of length 1..H) and its spec."""
    import polars as pl

    H, S, A = 20, 716, 25
    rng = np.random.default_rng(seed)
    L = rng.integers(1, H + 1, size=2 * rows // H + 2)
    ends = np.cumsum(L)
    n_ep = int(np.searchsorted(ends, rows)) + 1
    L = L[:n_ep]
    L[-1] -= int(ends[n_ep - 1]) - rows
    ep = np.repeat(np.arange(n_ep, dtype=np.int64), L)
    step = (np.arange(rows) - np.repeat(np.cumsum(L) - L, L)).astype(np.int32)
    chain = rng.integers(0, S - 3, size=rows + n_ep, dtype=np.int32)  # states 713..715 are terminal
    idx = np.arange(rows) + ep
    last = step == np.repeat(L - 1, L)
    pl.DataFrame({"episode_id": ep, "step": step, "state": chain[idx],
                  "action": rng.integers(0, A, rows, dtype=np.int32), "reward": np.zeros(rows),
                  "next_state": chain[idx + 1], "terminated": np.zeros(rows, bool),
                  "truncated": last & (step == H - 1)}).write_parquet(path)
    spec = {"format_version": 1, "dataset_id": "bench-synthetic", "horizon": H, "n_states": S, "n_actions": A,
            "terminal_states": [713, 714, 715], "reward_range": [0.0, 1.0],
            "privacy_unit": {"column": None, "max_episodes": 1}}
    spec_path.write_text(json.dumps(spec))


def make_simulated(path: Path, spec_path: Path, rows: int, seed: int) -> None:
    """``privaudit simulate icu-sepsis`` with about ``rows`` rows (8.1 rows per episode)."""
    episodes = int(rows / 8.1)
    cmd = [sys.executable, "-c", "from privaudit.cli import main; main()", "simulate", "icu-sepsis", "--episodes", str(episodes),
           "--behaviour", "clinicians", "--seed", str(seed), "--out", str(path), "--spec-out", str(spec_path)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def measure(logs: Path, spec: Path, threads: int) -> dict:
    """Validate in a fresh subprocess; return its timing and peak RSS (MiB)."""
    env = dict(os.environ, POLARS_MAX_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", CHILD, str(logs), str(spec)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--source", choices=["simulate", "synthetic"], default="simulate")
    ap.add_argument("--logs", type=Path)
    ap.add_argument("--spec", type=Path)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "privaudit-bench")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="POLARS_MAX_THREADS of the child")
    ap.add_argument("--seed", type=int, default=2026)
    a = ap.parse_args(argv)
    if a.logs:
        logs, spec = a.logs, a.spec
        if spec is None:
            ap.error("--logs needs --spec")
    else:
        a.workdir.mkdir(parents=True, exist_ok=True)
        logs = a.workdir / f"{a.source}_{a.rows}.parquet"
        spec = a.workdir / f"{a.source}_{a.rows}_spec.json"
        if not (logs.exists() and spec.exists()):
            print(f"making {logs} ({a.source}) ...", file=sys.stderr)
            (make_simulated if a.source == "simulate" else make_synthetic)(logs, spec, a.rows, a.seed)
    print(f"log: {logs} ({logs.stat().st_size / 2**20:.0f} MiB on disk)")
    for i in range(a.repeats):
        r = measure(logs, spec, a.threads)
        print(f"run {i + 1}: {r['rows']:,} rows, {r['episodes']:,} episodes, valid={r['ok']}: "
              f"{r['seconds']:.2f} s, {r['rows'] / r['seconds'] / 1e6:.1f} M rows/s "
              f"(CPU {r['cpu_seconds']:.2f} s), "
              f"peak RSS {r['peak_rss_mib']:.0f} MiB (threads={a.threads})")
        if not r["ok"]:
            print("error: the benchmark log is not valid", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
