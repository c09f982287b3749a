"""polars vs Spark (local mode) on the clinicians' value statistics and the evaluated stays' cells: identical, time.

Run: python benchmarks/bench_spark_stats.py [--rows 1e6] [--master local[2]] [--driver-memory 4g]

Logs: those of ``benchmarks/bench_spark.py`` (the clinicians' policy simulated on ICU-Sepsis, H=20, S=716,
A=25, a ``patient`` column of 3 episodes, k = 2; cached in the temp folder). Each engine runs in a fresh
child process: read, fatal rules and bounding, then the statistics of the behaviour-value release
(``BehaviourValueRelease.exact_statistics``) and the one-stay-per-unit cell tables of the policy evaluation
(``ope.model.held_out_stays``), each on the bounded logs of the engine. The two engines' statistics and
tables are asserted identical. Printed per engine: wall time of each phase, CPU time (Python, plus the JVM's
for Spark, read from /proc), peak RSS. On a shared machine the CPU times say more than the wall times.
"""

from __future__ import annotations

import argparse
import json
import pickle
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spark import _jvm_usage, _vm_hwm_mb, bench_session, make_logs, spark_options  # noqa: E402  (the same cached logs, probes, options)
from childproc import cache_dir  # noqa: E402


def child(engine: str, logs: str, spec_path: str, out: str, master: str, driver_memory: str) -> None:
    """One engine: bound, then the two statistics; pickles them to ``out``, prints figures as JSON."""
    from privaudit.core.spec import load_spec
    from privaudit.ope.model import held_out_stays
    from privaudit.privacy.budget import resolve_budget
    from privaudit.release.behaviour_value import BehaviourValueRelease

    spec = load_spec(spec_path)
    plan = BehaviourValueRelease.plan(spec, resolve_budget(rho=1.0))
    t = time.perf_counter()
    phases, jvm_cpu, jvm_rss = {}, 0.0, 0.0
    if engine == "polars":
        from privaudit.data.prepare import prepare_logs

        bounded = prepare_logs(logs, spec).bounded
        phases["bound"] = time.perf_counter() - t
    else:
        from privaudit.data.spark.prepare import prepare_spark_logs

        spark = bench_session(master, driver_memory)
        phases["session"] = time.perf_counter() - t
        bounded = prepare_spark_logs(logs, spec, spark=spark).bounded  # bounded once (cached), read twice
        phases["bound"] = time.perf_counter() - t
    value = plan.exact_statistics(bounded)
    phases["value"] = time.perf_counter() - t
    stays = held_out_stays(bounded, spec)
    phases["stays"] = time.perf_counter() - t
    if engine == "spark":
        jvm_cpu, jvm_rss = _jvm_usage(spark)
        spark.stop()
    Path(out).write_bytes(pickle.dumps((value, stays.__dict__)))
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"engine": engine, "phases_s": phases, "py_cpu_s": ru.ru_utime + ru.ru_stime,
                      "jvm_cpu_s": jvm_cpu, "py_rss_MB": _vm_hwm_mb("self"), "jvm_rss_MB": jvm_rss,
                      "episodes": value["episode_count"], "cells": int(stays.count.size)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    spark_options(ap, 1e6)
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    import numpy as np
    import polars as pl

    cache = cache_dir()
    rows = int(a.rows)
    logs, spec = make_logs(rows, min(rows, int(a.parts_of)), cache)
    n = pl.scan_parquet(logs / "*.parquet").select(pl.len()).collect().item()
    print(f"ICU-Sepsis clinicians' logs, {n:,} rows in {len(list(logs.glob('*.parquet')))} part(s); k=2 per "
          f"patient of 3 episodes; Spark {a.master}, driver {a.driver_memory}")
    got = {}
    for engine in ("polars", "spark"):
        out = cache / f"stats_{engine}_{rows:.0e}.pkl"
        res = subprocess.run([sys.executable, __file__, "--child", engine, str(logs), str(spec), str(out), a.master,
                              a.driver_memory], capture_output=True, text=True, check=True)
        line = json.loads(res.stdout.strip().splitlines()[-1])
        print(json.dumps(line))
        got[engine] = pickle.loads(out.read_bytes())
    (va, sa), (vb, sb) = got["polars"], got["spark"]
    assert set(va) == set(vb) and all(np.array_equal(np.asarray(va[k]), np.asarray(vb[k])) for k in va)
    assert set(sa) == set(sb) and all(np.array_equal(sa[k], sb[k]) for k in sa)
    print("identical: the value statistics", sorted(va), "and the stay cells", sorted(sa))


if __name__ == "__main__":
    main()
