"""The registry-scale memory guard (issue 33): peak resident memory of the CLI on generated logs.

Peak memory on a fixed workload depends far less on the machine than time does (it still varies run to run
with the streaming engine's timing, by up to ~20% measured): each command
runs in a fresh child process and its own peak RSS is read from ``os.wait4`` (the child's rusage,
stdlib). The logs are ICU-Sepsis stays of the clinicians' policy (``privaudit.mdp.simulate``, fixed
seed), written into a temporary folder, at two sizes: SMALL and LARGE stays (about 8.1 rows per
stay). Each of ``validate``, ``release`` (the release step on its own) and ``pipeline`` must stay
under an absolute bound at LARGE and under a bound on the ratio of its two peaks: memory that grows
with the rows shows in the ratio, a fixed cost that grows shows in the bound. The bounds and what
they would have caught are in docs/benchmarks.md ("The memory guard").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from privaudit.mdp.icu_sepsis import clinicians_policy, load_icu_sepsis
from privaudit.mdp.simulate import simulate, write_logs

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "sample_data" / "icu_sepsis_spec.json"
#: The two sizes (stays): 0.8 M and 3.2 M rows.
SMALL, LARGE = 100_000, 400_000
#: Command -> (largest growth peak(LARGE) - peak(SMALL), MiB; largest peak(LARGE) / peak(SMALL)). Growth, not the
#: absolute peak: the fixed part differs between environments (CI's fresh venv: validate 321 -> 397 MiB, 70 MiB
#: above the development venv's 251 -> 330 for the same work), the growth with the rows does not. Measured on polars 2.1.0,
#: numpy 2.4.6, pyarrow 26.0.1, Python 3.11 (2026-12-02, docs/benchmarks.md "The memory guard"): validate
#: 252 -> 304 MiB (ratio 1.21), release 404 -> 394 (0.98), pipeline 609 -> 612 (1.00); after the merges of
#: 2026-12-02, three runs each: validate 250 -> 333 (1.33), release 412-432 -> 436-514 (up to 1.26), pipeline
#: 617-667 -> 718-780 (up to 1.26): the streaming engine's peaks vary run to run, the bounds clear them. With the
#: replace_strict lookup of reward_not_public put back, validate went 243 -> 355 MiB (ratio 1.46), and
#: 247 -> 373 MiB with the later episode-table and return-rule changes: it fails (growth 126 MiB, ratio 1.51). The children
#: run on 2 polars threads (CI's 2 cores), as the thread count changes the streaming engine's buffers. Issue 33's
#: second round (later on 2026-12-02): main before it validate 248 -> 268, release 362 -> 362, pipeline 597 -> 598;
#: after it (2 runs) validate 247-255 -> 307-316, release 359 -> 362-364, pipeline 595-600 -> 600-601. The bounds
#: were kept: what that round fixed shows only from ~1e6 stays, and validate varies by +-30 MiB on the same code.
#: Measured again on a quiet machine after that round was merged (2026-12-02, six runs of validate, on the
#: round's own branch and on main after it): 251-274 -> 369-410 MiB, growth 108-152 MiB, ratio 1.41-1.59 (the
#: round's screens and parts hold per-episode state up to their part size, 10^6 episodes, so between these two
#: sizes it grows, and above it no longer: 349 / 452 / 771 MiB at 10^6 / 3 10^6 / 10^7 stays, where main before
#: the round took 1,598 MiB at 10^7, docs/benchmarks.md). Validate's bound was raised from (105, 1.42) to
#: (175, 1.70): the replace_strict regression above (+66 MiB of growth) still passes it on top of 152 MiB.
BOUNDS = {
    "validate": (175.0, 1.70),
    "release": (150.0, 1.40),
    "pipeline": (220.0, 1.40),
}


#: The child: the CLI, then (atexit, also after sys.exit) its own peak RSS (VmHWM of /proc/self/status, in
#: KiB) into the file named by argv[1]. Not ``ru_maxrss``: Linux carries the parent's peak into a child
#: over fork and exec, and the parent here (pytest, with the logs it simulated) is large.
CHILD = """
import atexit, re, sys
from pathlib import Path
def peak(out=sys.argv[1]):
    Path(out).write_text(re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1))
atexit.register(peak)
from privaudit.cli import main
sys.argv = ["privaudit", *sys.argv[2:]]
sys.exit(main())
"""


def command(name: str, logs: Path, out: Path) -> list[str]:
    """The CLI arguments of ``privaudit NAME`` on ``logs`` (the release and pipeline write into ``out``)."""
    return {"validate": ["validate", str(logs), "--spec", str(SPEC)],
            "release": ["release", str(logs), "--spec", str(SPEC), "--rho", "1", "--out", str(out)],
            "pipeline": ["pipeline", str(logs), "--spec", str(SPEC), "--rho", "1", "--out", str(out)]}[name]


def peak_mib(args: list[str], cwd: Path) -> float:
    """Run ``privaudit ARGS`` in a fresh child process; its own peak resident set size in MiB."""
    peak = cwd / "peak.txt"
    res = subprocess.run([sys.executable, "-c", CHILD, str(peak), *args], cwd=cwd, capture_output=True, text=True,
                         env={**os.environ, "POLARS_MAX_THREADS": "2",
                              "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])})
    assert res.returncode == 0, res.stderr[-2000:]
    return int(peak.read_text()) / 1024


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[int, Path]:
    """SMALL simulated ICU-Sepsis stays (seed 33); LARGE: LARGE // SMALL copies of them, ids shifted."""
    return make_logs(tmp_path_factory.mktemp("memory-guard"))


def make_logs(folder: Path) -> dict[int, Path]:
    """Write the two logs into ``folder`` (simulating SMALL stays once; copies make LARGE distinct stays)."""
    df = simulate(load_icu_sepsis(), clinicians_policy(), SMALL, np.random.default_rng(33))
    big = pl.concat([df.with_columns(pl.col("episode_id") + i * SMALL, pl.col("unit_id") + i * SMALL)
                     for i in range(LARGE // SMALL)])
    return {SMALL: write_logs(df, folder / "small.parquet"), LARGE: write_logs(big, folder / "large.parquet")}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc (Linux)")
@pytest.mark.parametrize("name", list(BOUNDS))
def test_peak_memory_does_not_grow_with_the_rows(name, logs, tmp_path):
    peak = {n: peak_mib(command(name, logs[n], tmp_path / f"out-{n}"), tmp_path) for n in (SMALL, LARGE)}
    bound, ratio = BOUNDS[name]
    got = f"privaudit {name}: peak RSS {peak[SMALL]:.0f} MiB at {SMALL:,} stays, {peak[LARGE]:.0f} MiB at {LARGE:,}"
    assert peak[LARGE] - peak[SMALL] <= bound, f"{got}: grows by more than {bound:.0f} MiB"
    assert peak[LARGE] / peak[SMALL] <= ratio, f"{got}: ratio {peak[LARGE] / peak[SMALL]:.2f} above {ratio}"
