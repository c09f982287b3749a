"""Peak working memory of ``privaudit release`` per int64 transition slice.

Measures, in a fresh subprocess per case, the peak resident set size
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) added by one ``release_logs``
call over the RSS just before it, and divides it by the bytes of one dense
(S, A, S) int64 h-slice (8 S^2 A). The quotient is the multiplier that
``privaudit.release.size.MEMORY_PER_SLICE_BYTE`` must cover (the release
refuses a domain whose estimate exceeds the machine's physical memory).

Usage: python benchmarks/bench_release_memory.py [S] [A]   (default S=1000, A=10: 80 MB per slice)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, "tests")
from _release_logs import random_log, write_spec
from privaudit.release.tabular import ReleaseOptions, release_logs

S, A, H, mech, noise = int(sys.argv[1]), int(sys.argv[2]), 3, sys.argv[3], sys.argv[4]
d = Path(tempfile.mkdtemp())
spec = write_spec(d, H=H, S=S, A=A, terminals=(S - 1,))
random_log(np.random.default_rng(0), 2000, H=H, S=S, A=A, terminals=(S - 1,)).write_parquet(d / "l.parquet")
def rss():  # current RSS in bytes
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
kw = dict(rho=1.0) if mech == "gaussian" else dict(epsilon=1.0)
release_logs(d / "l.parquet", spec, mechanism=mech, options=ReleaseOptions(noise=noise), out=d / "warm", seed=1, **kw)  # warm imports
before = rss()
peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
release_logs(d / "l.parquet", spec, mechanism=mech, options=ReleaseOptions(noise=noise), out=d / "r", seed=1, **kw)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"before": before, "peak_before": peak_before, "peak": peak}))
"""


def main(S: int = 1000, A: int = 10) -> None:
    slice_bytes = 8 * S * A * S
    print(f"S={S} A={A} H=3: one int64 (S, A, S) slice = {slice_bytes / 2**20:.0f} MiB")
    for mech, noise in [("gaussian", "exact"), ("laplace", "exact")]:  # releases refuse "rounded"
        with tempfile.TemporaryDirectory():
            r = subprocess.run([sys.executable, "-c", CHILD, str(S), str(A), mech, noise],
                               capture_output=True, text=True, check=True)
        d = json.loads(r.stdout.strip().splitlines()[-1])
        # ru_maxrss is a high-water mark: the warm-up run may already have set it; the
        # second run's peak is at least the warm-up's, so take the larger increase
        extra = max(d["peak"], d["peak_before"]) - d["before"]
        print(f"  {mech:8s} {noise:7s}: peak RSS over start = {extra / 2**20:7.0f} MiB "
              f"= {extra / slice_bytes:.2f} x slice")


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))
