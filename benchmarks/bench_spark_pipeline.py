"""The whole pipeline on Spark (local mode) against polars: identical outputs, CPU and peak memory, and the cost
of the whole run on Spark per 10^7 rows against the release-only Spark path.

Run: python benchmarks/bench_spark_pipeline.py [--rows 1e6] [--parts-of 1e6] [--master local[2]]
     [--driver-memory 4g] [--modes polars,spark,spark-release]

Logs: the clinicians' policy simulated on ICU-Sepsis (H=20, S=716, A=25), the folder of parts of
``bench_spark.make_logs`` (cached under the temp folder), under a spec that keeps ICU-Sepsis's public reward
r(s') (so DP-PBB trains) and k = 2 episodes per patient of 3. Each mode runs in a fresh child process:

* ``polars``: ``run_pipeline(..., engine="polars")`` (rho = 1, value share 0.1: the clinicians' value part, no audit, no MDP: pooled
  counts; the release and DP-PBB with its share; DP-APVI on the release);
* ``spark``: the same with ``engine="spark"`` on a ``local[2]`` session: Spark reads, checks and bounds the
  logs once, counts them for the release, DP-PBB's capped counts and the clinicians' value statistics;
* ``spark-release``: ``release_logs(..., engine="spark")`` alone (the release-only Spark path, pooled).

Printed per mode: wall time, the number of Spark jobs, CPU time (user + sys of the Python process plus, for Spark, the JVM's, read from
/proc before it stops), peak RSS (Python, plus the JVM's VmHWM). Asserted: the polars and Spark pipelines'
release tables and policies are byte-identical and their summaries equal but for ``created`` and
``config.engine``. On a shared machine the CPU times, not the wall times, say what idle cores need. A mode
that fails (Spark out of memory: raise ``--driver-memory``) is printed as FAILED with its wall time and the
last line of its error, and the other modes still run; the comparisons need both of their modes.

Large logs: ``--parts-of`` writes the simulated logs as a folder of parts of that many rows, simulated one at a
time (10^8 rows as ten parts of 10^7 rows, about 0.5 GB of Parquet, under ``$TMPDIR/privaudit-bench``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

from bench_spark import _jvm_usage, _vm_hwm_mb, bench_session, make_logs, pipeline_spec, spark_options
from childproc import ChildFailed, cache_dir, run_child


def child(mode: str, logs: str, spec_path: str, out: str, master: str, driver_memory: str) -> None:
    """One mode's run; prints timings and usage as JSON."""
    from privaudit.core.spec import load_spec
    from privaudit.data.repairs import RepairLimit
    from privaudit.pipeline.run import run_pipeline
    from privaudit.release.tabular import ReleaseOptions, release_logs

    spec = load_spec(spec_path)
    t = time.perf_counter()
    spark, t_start = None, 0.0
    if mode != "polars":
        spark = bench_session(master, driver_memory)
        t_start = time.perf_counter() - t
    if mode == "spark-release":
        release_logs(logs, spec, rho=1.0, stationary=True, out=out, seed=1,
                     options=ReleaseOptions(engine="spark", spark=spark, repairs=RepairLimit(accept=True)))
    else:
        run_pipeline(logs, spec, rho=1.0, out=out, seed=1, audit_trials=0, value_share=0.1, accept_repairs=True,
                     engine="spark" if spark is not None else "polars", spark=spark, progress=False)
    jvm_cpu = jvm_rss = 0.0
    jobs = 0
    if spark is not None:
        jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup())  # every job (none has a group)
        jvm_cpu, jvm_rss = _jvm_usage(spark)
        spark.stop()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"mode": mode, "wall_s": time.perf_counter() - t, "session_start_s": t_start,
                      "py_cpu_s": ru.ru_utime + ru.ru_stime, "jvm_cpu_s": jvm_cpu,
                      "py_rss_MB": _vm_hwm_mb("self"), "jvm_rss_MB": jvm_rss, "spark_jobs": jobs}))


def _normalised_summary(out: Path) -> dict:
    doc = json.loads((out / "summary.json").read_text())
    doc["created"] = doc["config"]["engine"] = None
    return doc


def assert_identical(a: Path, b: Path) -> int:
    """Byte-identical release tables and policies, equal summaries (but ``created``, engine); the files compared."""
    tables = sorted(p.relative_to(a) for p in a.rglob("*.parquet"))
    assert tables == sorted(p.relative_to(b) for p in b.rglob("*.parquet")), "different files"
    assert any(str(p).startswith("policies/dp-pbb") for p in tables), "DP-PBB not trained"
    for p in tables:
        assert (a / p).read_bytes() == (b / p).read_bytes(), p
    assert _normalised_summary(a) == _normalised_summary(b), "summaries differ"
    return len(tables) + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    spark_options(ap, 1e6)
    ap.add_argument("--modes", default="polars,spark,spark-release")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    import polars as pl

    t, cache = time.perf_counter(), cache_dir()
    logs, spec = make_logs(int(a.rows), int(a.parts_of), cache)
    spec = pipeline_spec(spec)
    rows = pl.scan_parquet(logs / "*.parquet").select(pl.len()).collect().item()
    print(f"ICU-Sepsis shape H=20, S=716, A=25, pooled counts, public reward; {rows:,} rows in "
          f"{len(list(logs.glob('*.parquet')))} part(s) (ready in {time.perf_counter() - t:.0f} s); k=2 per patient "
          f"of 3 episodes; {os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.1f}", flush=True)
    outs, cpu = {}, {}
    for mode in a.modes.split(","):
        outs[mode] = cache / f"pipeline_{mode}_{rows}"
        shutil.rmtree(outs[mode], ignore_errors=True)
        t_mode = time.perf_counter()
        try:
            r = run_child(__file__, mode, logs, spec, outs[mode], a.master, a.driver_memory)
        except ChildFailed as e:  # e.g. Spark out of memory: say where and go on with the other modes
            last = next((ln for ln in reversed(str(e).splitlines()) if ln.strip()), "no message")
            print(f"  {mode:<13} FAILED after {time.perf_counter() - t_mode:.0f} s wall ({a.master}, driver memory "
                  f"{a.driver_memory}): {last.strip()}  load {os.getloadavg()[0]:.1f}", flush=True)
            continue
        cpu[mode] = r["py_cpu_s"] + r["jvm_cpu_s"]
        rss = r["py_rss_MB"] + r["jvm_rss_MB"]
        extra = (f" ({r['spark_jobs']} Spark jobs; session start {r['session_start_s']:.1f} s; JVM CPU {r['jvm_cpu_s']:.1f} s, JVM peak "
                 f"{r['jvm_rss_MB']:.0f} MB, Python peak {r['py_rss_MB']:.0f} MB; {a.master}, driver memory "
                 f"{a.driver_memory})" if mode != "polars" else "")
        print(f"  {mode:<13} wall {r['wall_s']:7.1f} s  CPU {cpu[mode]:7.1f} s  ({cpu[mode] / rows * 1e7:.1f} s per "
              f"10^7 rows)  peak RSS {rss:6.0f} MB{extra}  load {os.getloadavg()[0]:.1f}", flush=True)
    if "polars" in cpu and "spark" in cpu:
        n = assert_identical(outs["polars"], outs["spark"])
        print(f"  polars and Spark pipelines: {n} outputs identical (release tables, policies, summary)")
    if "spark" in cpu and "spark-release" in cpu:
        print(f"  whole pipeline on Spark / release-only Spark path, CPU: {cpu['spark'] / cpu['spark-release']:.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
