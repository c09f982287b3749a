"""polars vs Spark (local mode) on the data side of a release: identical exact counts, time, memory.

Run: python benchmarks/bench_spark.py [--rows 1e7] [--engines polars,spark] [--master local[2]]
     [--driver-memory 4g] [--parts-of 1e7]
     python benchmarks/bench_spark.py --sizes 1e7,3e7,1e8   (the scaling run: the first parts of one folder)

Logs: the clinicians' policy simulated on ICU-Sepsis (H=20, S=716, A=25),
about 8.1 rows per episode, written as Parquet parts of ``--parts-of`` rows
(each part its own simulation seed, episode ids offset so they stay unique),
cached under the temp folder. Rewards are declared private (summed too). A ``patient`` column groups episodes 3 by 3
and the spec keeps k = 2 per patient, so keep-k drops episodes (by the
portable key) and rewards, cut at H and the fatal rules all run.

Each engine runs in a fresh child process doing what ``privaudit release``
does before the noise: validate the fatal rules, bound contributions, count
the exact per-step cells (visits, transitions, reward sums in integer units
of the release's quantum), and fetch the tables as the release does (the
(H, S, A) tables once, then one transition slice per h; with Spark, one
collection per h). The two cell tables and bounding reports are asserted
identical. Printed per engine: wall time, CPU time (user + sys of the
Python process, plus, for Spark, of the JVM read from /proc before it stops),
peak RSS (Python, plus the JVM's VmHWM for Spark). On a shared machine the CPU
times, not the wall times, say what idle cores need.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS_PER_EPISODE = 8.1  # ICU-Sepsis, clinicians' policy, H = 20 (bench_simulate)


def lumped_states(states: int):
    """ICU-Sepsis's 716 states lumped into ``states`` >= 4: int64 array of shape (716,), old -> new state.

    A non-terminal state s < 713 goes to s mod (states - 3), the terminal states 713, 714, 715 to the last
    three, in order; ``states`` = 716 is the identity. A function of the state, so lumped logs keep the chain
    (next_state = the next row's state), the terminal states and the public next-state reward r(s').
    """
    import numpy as np

    from privaudit.mdp.icu_sepsis import N_STATES, TERMINAL_STATES

    if not 4 <= int(states) <= N_STATES:
        raise ValueError(f"states must be in [4, {N_STATES}]; got {states}")
    old = np.arange(N_STATES)
    new = old % (int(states) - len(TERMINAL_STATES))
    new[list(TERMINAL_STATES)] = np.arange(int(states) - len(TERMINAL_STATES), int(states))
    return new


def make_logs(rows: int, parts_of: int, folder: Path, *, states: int = 716,
              actions: int = 25) -> tuple[Path, Path]:
    """Simulate (or reuse) a folder of ICU-Sepsis parts of about ``rows`` rows and its spec.

    ``states`` and ``actions`` below ICU-Sepsis's 716 and 25 lump the simulated logs into a smaller domain
    (:func:`lumped_states`, action a mod ``actions``): the same episodes, lengths and rewards, dense tables of
    that size (the memory guard, ``tests/perf/test_memory_guard.py``, so that per-row memory shows).
    """
    import numpy as np
    import polars as pl

    from privaudit.mdp.registry import MDP_REGISTRY, build_mdp
    from privaudit.mdp.simulate import behaviour_policy, simulate
    from privaudit.core.spec import write_spec

    lumped = "" if (states, actions) == (716, 25) else f"_S{states}A{actions}"
    lump = lumped_states(states)
    logs = folder / f"spark_{rows:.0e}_{parts_of:.0e}{lumped}"
    spec = folder / f"spark_{rows:.0e}{lumped}.spec.json"
    n_parts = max(1, round(rows / parts_of))
    mdp = None
    logs.mkdir(parents=True, exist_ok=True)
    per_part = int(round(rows / n_parts / ROWS_PER_EPISODE))
    for i in range(n_parts):
        part = logs / f"part-{i:04d}.parquet"
        if part.exists():
            continue
        if mdp is None:
            mdp = build_mdp("icu-sepsis")
            pi = behaviour_policy("clinicians", mdp)
        df = simulate(mdp, pi, per_part, rng=np.random.default_rng(1000 + i))
        df = df.with_columns((pl.col("episode_id").cast(pl.Int64) + i * per_part).alias("episode_id"))
        df = df.with_columns((pl.col("episode_id") // 3).alias("patient"))
        if lumped:
            df = df.with_columns(*(pl.col(x).map_batches(lambda v: pl.Series(lump[v.to_numpy()]).cast(v.dtype))
                                   for x in ("state", "next_state")), pl.col("action") % actions)
        tmp = part.with_suffix(".tmp")
        df.write_parquet(tmp, compression="zstd", statistics=True)
        tmp.rename(part)
    doc = MDP_REGISTRY["icu-sepsis"].spec_doc(build_mdp("icu-sepsis") if mdp is None else mdp,
                                              "icu-sepsis-spark-bench", "benchmark log")
    doc["privacy_unit"] = {"column": "patient", "max_episodes": 2}
    doc["n_states"], doc["n_actions"] = int(states), int(actions)
    doc["terminal_states"] = sorted({int(lump[s]) for s in doc["terminal_states"]})
    doc.pop("public_reward", None)  # private rewards: the reward sums are counted too
    if not spec.exists():
        write_spec(doc, spec)
    return logs, spec


def pipeline_spec(spec_path: Path) -> Path:
    """``make_logs``' spec with ICU-Sepsis's public reward put back (DP-PBB backs up r(s')), lumped like the logs."""
    from privaudit.core.spec import write_spec
    from privaudit.mdp.registry import MDP_REGISTRY, build_mdp

    out = spec_path.with_name(spec_path.stem + ".public-reward.json")
    if not out.exists():
        doc = json.loads(spec_path.read_text())
        full = MDP_REGISTRY["icu-sepsis"].spec_doc(build_mdp("icu-sepsis"), doc["dataset_id"], "benchmark log")
        lump = lumped_states(doc["n_states"])
        doc["public_reward"] = {**full["public_reward"],
                                "values": {str(lump[int(s)]): v for s, v in full["public_reward"]["values"].items()}}
        write_spec(doc, out)
    return out

def _quantum(spec) -> int:
    from privaudit.privacy.budget import resolve_budget
    from privaudit.release.mechanism import TabularRelease

    release = TabularRelease.plan(spec, resolve_budget(rho=1.0), stationary=False, noise="exact")
    return release.families["rewards"].quantum


def _vm_hwm_mb(pid) -> float:
    """Peak RSS of one process (VmHWM, MB). Not ru_maxrss: Linux carries that across fork + exec, so a
    child would report the parent's RSS (here the simulated log) as its own peak."""
    return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmHWM:")) / 1024


def _jvm_usage(spark) -> tuple[float, float]:
    """(CPU seconds, peak RSS MB) of the local-mode JVM, read from /proc before it stops."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return cpu, _vm_hwm_mb(pid)


def bench_session(master: str, driver_memory: str):
    """The benchmarks' SparkSession: ``master``, a driver heap of ``driver_memory``, no UI, Spark's log at ERROR."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (SparkSession.builder.master(master).appName("privaudit-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", driver_memory).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _fetch_like_release(counts) -> None:
    """What the release reads of the exact counts: the (H, S, A) tables, then one (S, A, S) slice per h."""
    counts.visits, counts.rewards
    for _h, _slice in counts.iter_transitions():
        pass


def spark_options(ap: argparse.ArgumentParser, rows: float) -> None:
    """``--rows``, ``--parts-of``, ``--master`` and ``--driver-memory``: the options of the Spark benchmarks."""
    ap.add_argument("--rows", type=float, default=rows)
    ap.add_argument("--parts-of", type=float, default=rows, help="rows per Parquet part")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="4g")


def child(engine: str, logs: str, spec_path: str, cells_out: str, master: str, driver_memory: str) -> None:
    """One engine's data side; writes its cell table, prints timings and usage as JSON."""
    from privaudit.core.spec import load_spec

    spec = load_spec(spec_path)
    quantum = _quantum(spec)
    t = time.perf_counter()
    jvm_cpu = jvm_rss = 0.0
    phases = {}  # Spark: (wall s, JVM CPU s) at the end of each phase, from the start
    if engine == "polars":
        import polars as pl

        from privaudit.data.prepare import prepare_logs
        from privaudit.data.counts import sparse_counts

        prepared = prepare_logs(logs, spec)
        cols = [pl.col(c).cast(pl.Int32) for c in ("step", "state", "action", "next_state")]
        frame = prepared.bounded.select(cols + [pl.col("reward")]).collect()
        counts = sparse_counts(frame, spec, stationary=False, quantum=quantum)
        report = prepared.bounding
        t_start = 0.0
        _fetch_like_release(counts)
    else:
        from privaudit.data.spark.engine import spark_sparse_counts

        spark = bench_session(master, driver_memory)
        t_start = time.perf_counter() - t
        counts, report = spark_sparse_counts(logs, spec, spark=spark, stationary=False, quantum=quantum)
        phases["count"] = (time.perf_counter() - t, _jvm_usage(spark)[0])  # rules, bounding, cells cached
        _fetch_like_release(counts)
        phases["fetch"] = (time.perf_counter() - t, _jvm_usage(spark)[0])  # (H, S, A) tables, then one job per h
        counts.cells  # the whole table, for the identity check (the release never collects it)
        jvm_cpu, jvm_rss = _jvm_usage(spark)
        spark.stop()
    wall = time.perf_counter() - t
    counts.cells.write_parquet(cells_out)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"engine": engine, "wall_s": wall, "session_start_s": t_start,
                      "py_cpu_s": ru.ru_utime + ru.ru_stime, "jvm_cpu_s": jvm_cpu,
                      "py_rss_MB": _vm_hwm_mb("self"), "jvm_rss_MB": jvm_rss,
                      "cells": counts.cells.height, "phases": phases, "report": report.to_dict()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    spark_options(ap, 1e7)
    ap.add_argument("--engines", default="polars,spark")
    ap.add_argument("--sizes", default=None,
                    help="scaling run: comma-separated row counts (multiples of --parts-of), each the first parts "
                         "of one folder of max(sizes) rows; both engines at each size")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    cache = Path(tempfile.gettempdir()) / "privaudit-bench"
    cache.mkdir(exist_ok=True)
    if a.sizes is None:
        compare(a, cache, int(a.rows), None)
        return
    sizes = [int(float(x)) for x in a.sizes.split(",")]  # in the order given
    full, spec = make_logs(max(sizes), int(a.parts_of), cache)
    parts = sorted(full.glob("*.parquet"))
    for rows in sizes:
        n = max(1, round(rows / a.parts_of))
        folder = cache / f"spark_scale_{rows:.0e}"
        folder.mkdir(exist_ok=True)
        for part in parts[:n]:
            link = folder / part.name
            if not link.exists():
                link.symlink_to(part)
        compare(a, cache, rows, (folder, spec))


def compare(a, cache: Path, rows: int, made) -> None:
    """Run each engine on one folder in a fresh child process; print figures; assert identical tables."""
    import polars as pl

    t = time.perf_counter()
    logs, spec = make_logs(rows, int(a.parts_of), cache) if made is None else made
    t_sim = time.perf_counter() - t
    rows = pl.scan_parquet(logs / "*.parquet").select(pl.len()).collect().item()
    print(f"ICU-Sepsis shape H=20, S=716, A=25, per-step cells; {rows:,} rows in "
          f"{len(list(logs.glob('*.parquet')))} part(s) (made in {t_sim:.0f} s); k=2 per patient of 3 episodes; "
          f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}", flush=True)
    env = dict(os.environ, POLARS_MAX_THREADS="2")
    results = {}
    for engine in a.engines.split(","):
        cells = cache / f"cells_{engine}.parquet"
        res = subprocess.run([sys.executable, __file__, "--child", engine, str(logs), str(spec), str(cells),
                              a.master, a.driver_memory], capture_output=True, text=True, env=env)
        if res.returncode:
            sys.exit(f"{engine} failed:\n{res.stderr[-3000:]}")
        r = json.loads(res.stdout.strip().splitlines()[-1])
        results[engine] = (r, cells)
        cpu = r["py_cpu_s"] + r["jvm_cpu_s"]
        rss = r["py_rss_MB"] + r["jvm_rss_MB"]
        extra = (f" (session start {r['session_start_s']:.1f} s; JVM CPU {r['jvm_cpu_s']:.1f} s, "
                 f"JVM peak {r['jvm_rss_MB']:.0f} MB, Python peak {r['py_rss_MB']:.0f} MB, "
                 f"master {a.master}, driver memory {a.driver_memory}; at the end of counting wall "
                 f"{r['phases']['count'][0]:.0f} s / JVM CPU {r['phases']['count'][1]:.1f} s, of the per-h fetch "
                 f"{r['phases']['fetch'][0]:.0f} s / {r['phases']['fetch'][1]:.1f} s)" if engine == "spark" else "")
        print(f"  {engine:<7} wall {r['wall_s']:7.1f} s  CPU {cpu:7.1f} s  ({cpu / rows * 1e7:.1f} s per 10^7 rows)"
              f"  peak RSS {rss:6.0f} MB  {r['cells']:,} observed cells{extra}", flush=True)
    if len(results) == 2:
        (ra, ca), (rb, cb) = results.values()
        same = pl.read_parquet(ca).equals(pl.read_parquet(cb)) and ra["report"] == rb["report"]
        print(f"  identical cell tables and bounding reports: {same}")
        if not same:
            sys.exit(1)
    print("  bounding: " + json.dumps(next(iter(results.values()))[0]["report"]))


if __name__ == "__main__":
    main()
