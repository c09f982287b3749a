"""Release speed and memory at the ICU-Sepsis shape (H=20, S=716, A=25: 256 M transition cells).

Run: python benchmarks/bench_release.py [--episodes 1000000] [--seed 0]

Simulates the clinicians' policy on ICU-Sepsis (``privaudit.mdp.simulate``,
cached under the temp folder), then runs one Gaussian release (rho = 1) of
the log in a fresh child process so that its peak resident memory is the
release's own. Prints the wall time per stage (validate, read + bound + count,
noise, write; writing slice h overlaps the noise of slice h + 1, so the stage
times add up to more than the total), peak RSS, the release's size on disk and
the time to read it back (visits, then every h-slice of the transitions).
Target: whole release <= 30 s on 2 cores. Each stage's CPU time is printed
beside its wall time: on a shared machine the CPU times, not the wall times,
say what an idle 2-core machine needs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from childproc import ChildFailed, cache_dir, run_child


def make_logs(episodes: int, seed: int, folder: Path) -> tuple[Path, Path]:
    """Simulate (or reuse) the ICU-Sepsis log and its spec."""
    import numpy as np

    from privaudit.mdp.registry import MDP_REGISTRY, build_mdp
    from privaudit.mdp.simulate import behaviour_policy, simulate, write_logs
    from privaudit.core.spec import write_spec

    logs, spec = folder / f"icu_{episodes}_{seed}.parquet", folder / f"icu_{episodes}_{seed}.spec.json"
    if logs.exists() and spec.exists():
        return logs, spec
    mdp = build_mdp("icu-sepsis")
    df = simulate(mdp, behaviour_policy("clinicians", mdp), episodes, rng=np.random.default_rng(seed))
    write_logs(df, logs)
    write_spec(MDP_REGISTRY["icu-sepsis"].spec_doc(mdp, "icu-sepsis-bench", "benchmark log"), spec)
    return logs, spec


def child(logs: str, spec: str, out: str, noise: str) -> None:
    """One release; prints its timings and peak RSS as JSON."""
    from privaudit.release.tabular import ReleaseOptions, release_logs

    t = time.perf_counter()
    info = release_logs(logs, spec, rho=1.0, out=out, options=ReleaseOptions(noise=noise))
    wall = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"timings": info.timings, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
                      "peak_rss_MB": ru.ru_maxrss / 1024}))


def read_back(out: Path) -> dict:
    from privaudit.release.tabular import load_release

    t = time.perf_counter()
    rel = load_release(out)
    t_load = time.perf_counter() - t
    t = time.perf_counter()
    for _h, _sl in rel.iter_transitions():
        pass
    t_all = time.perf_counter() - t
    return {"load_s": t_load, "transitions_per_h_s": t_all / rel.H, "transitions_all_s": t_all}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", choices=["exact"], default="exact")
    ap.add_argument("--child", nargs=4, metavar=("LOGS", "SPEC", "OUT", "NOISE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    cache = cache_dir()
    t = time.perf_counter()
    logs, spec = make_logs(a.episodes, a.seed, cache)
    t_sim = time.perf_counter() - t
    import polars as pl

    rows = pl.scan_parquet(logs).select(pl.len()).collect().item()
    work = Path(tempfile.mkdtemp(prefix="release-", dir=cache))  # own folder: other runs may share the cache
    out = work / "release"
    load0 = os.getloadavg()[0]
    try:
        r = run_child(__file__, logs, spec, out, a.noise)
    except ChildFailed as e:
        sys.exit(str(e))
    sizes = {p.name: p.stat().st_size / 1e6 for p in out.iterdir()}
    rb = read_back(out)
    tm = r["timings"]
    print(f"ICU-Sepsis shape H=20, S=716, A=25 (256 M transition cells); {a.episodes:,} episodes, "
          f"{rows:,} rows (log {'simulated' if t_sim > 1 else 'cached'} in {t_sim:.1f} s); "
          f"Gaussian rho=1, noise={a.noise}; {os.cpu_count()} cores")
    print("  stage                    wall      CPU")
    for k, label in [("validate", "validate"), ("read_count", "read + bound + count"), ("noise", "noise"),
                     ("write", "write (overlapped)")]:
        print(f"  {label:<22} {tm[k]:6.2f} s {tm[k + '_cpu']:6.2f} s")
    est = (tm["validate_cpu"] + tm["read_count_cpu"] + max(tm["noise_cpu"], tm["write_cpu"]))
    print(f"  whole release        {r['wall_s']:6.2f} s   (target <= 30 s); CPU time {r['cpu_s']:.1f} s "
          f"(user + sys, all threads); load average at start {load0:.1f}")
    print(f"  uncontended estimate {est:6.2f} s   (validate CPU + count CPU + max(noise CPU, write CPU): "
          f"what 2 idle cores need when polars gets no parallel speed-up)")
    print(f"  peak RSS             {r['peak_rss_MB']:6.0f} MB")
    print("  on disk              " + ", ".join(f"{k} {v:.1f} MB" for k, v in sorted(sizes.items())))
    print(f"  read back: load_release {rb['load_s']:.2f} s; transitions_at {rb['transitions_per_h_s']:.2f} s per h "
          f"({rb['transitions_all_s']:.1f} s for all 20)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
