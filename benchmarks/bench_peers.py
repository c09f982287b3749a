"""privaudit next to OpenDP and PipelineDP on the same dense noisy visit counts (time and peak memory ratios).

Run: python benchmarks/bench_peers.py [--episodes N] [--rho 1.0] [--delta 1e-6] [--repeat 1]

The task: ICU-Sepsis logs (the bundled sample of 20,000 stays by default;
``--episodes N`` simulates N stays, cached as in bench_release.py), bounded
once by privaudit (k = 1 episode per patient, H = 20 steps, rows in a
terminal state dropped), then the visit counts n_h(s, a) over the **whole
declared domain** (H x S x A = 20 x 716 x 25 = 358,000 cells, observed or
not) with Gaussian noise, by each tool from the same bounded rows:

* privaudit: ``stats.counts.visit_counts`` + ``privacy.mechanisms.add_noise``
  (exact discrete Gaussian, drawn in place), sigma from
  ``privacy.sensitivity.count_sensitivity`` (substitution of one patient:
  L2 = k sqrt(2H)) and ``gaussian_sigma(L2, rho)``: rho-zCDP;
* OpenDP (``opendp``, if installed): ``make_count_by_categories`` over the
  358,000 cell ids >> ``then_gaussian`` (exact discrete Gaussian), its scale
  found by ``binary_search_param`` so that the measurement's own privacy map
  gives rho at d_in = 2kH (symmetric distance of substituting one patient's
  <= kH rows): the same rho-zCDP for the same unit;
* PipelineDP (``pipeline_dp``, if installed; ``python -m pip install
  pipeline-dp``): ``DPEngine.aggregate`` COUNT on its LocalBackend with
  public partitions = the 358,000 cells, privacy id = patient,
  max_partitions_contributed = kH, max_contributions_per_partition = k,
  Gaussian noise, at the (epsilon, delta) that privaudit's rho converts to
  (``accounting.zcdp_to_dp``). PipelineDP's relation is add/remove one
  patient, so the same (epsilon, delta) is a weaker guarantee than
  privaudit's substitution one; its noise is pydp's floating-point Gaussian.

Each tool runs in a fresh child process on the same rows (an .npz of int
arrays), so its peak resident memory (VmHWM) is its own; printed per
tool: wall and CPU seconds of the counting + noise (OpenDP: building the
measurement, then invoking it), peak RSS and its growth over the RSS before
the run, the noise standard deviation it used (and the one measured against
the exact counts), and ratios to privaudit. A peer that is not installed is
skipped with a message. Nothing here is a project dependency.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from childproc import ChildFailed, cache_dir, run_child

TOOLS = ("privaudit", "opendp", "pipelinedp")


def _status_mb(key: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process in MiB, from /proc/self/status.

    VmHWM belongs to this process's own address space; ``getrusage``'s
    ru_maxrss would carry the parent's peak across fork + exec on Linux.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _rss_mb() -> float:
    return _status_mb("VmRSS")


def _finish(t0: float, c0: float, rss0: float, noisy, sd: float, extra: dict | None = None) -> dict:
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _status_mb("VmHWM")
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_MB": peak, "rss_growth_MB": max(peak - rss0, 0.0),
            "noise_sd": sd, "noisy": np.asarray(noisy, dtype=np.float64), **(extra or {})}


def run_privaudit(d: dict) -> dict:
    import polars as pl

    from privaudit.privacy.mechanisms import add_noise, gaussian_sigma
    from privaudit.privacy.sensitivity import count_sensitivity
    from privaudit.core.spec import DomainSpec
    from privaudit.data.counts import visit_counts

    spec = DomainSpec.from_dict(json.loads(str(d["spec"])))
    frame = pl.DataFrame({c: d[c] for c in ("step", "state", "action", "next_state")})
    rho, k = float(d["rho"]), int(d["k"])
    rss0 = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    sigma = gaussian_sigma(count_sensitivity(spec.H, k, False, "visits").l2, rho)
    n = visit_counts(frame, spec)
    noisy = add_noise(n, mechanism="gaussian", scale=sigma, rng=np.random.default_rng(), noise="exact", inplace=True)
    return _finish(t0, c0, rss0, noisy.ravel(), sigma)


def run_opendp(d: dict) -> dict:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    cells, n_cells = d["cells"].astype(np.int64), int(d["n_cells"])
    rho, d_in = float(d["rho"]), 2 * int(d["k"]) * int(d["H"])
    rss0 = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    count = dp.t.make_count_by_categories(dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.symmetric_distance(),
                                          categories=list(range(n_cells)), null_category=False,
                                          MO=dp.L2Distance[dp.i64])
    scale = dp.binary_search_param(lambda s: count >> dp.m.then_gaussian(scale=s), d_in=d_in, d_out=rho)
    meas = count >> dp.m.then_gaussian(scale=scale)
    t_build = time.perf_counter() - t0
    noisy = meas(cells.tolist())
    return _finish(t0, c0, rss0, noisy, scale, {"build_s": t_build, "rho_map": float(meas.map(d_in))})


def run_pipelinedp(d: dict) -> dict:
    import pipeline_dp

    cells, units = d["cells"].astype(np.int64), d["units"].astype(np.int64)
    n_cells, k, H = int(d["n_cells"]), int(d["k"]), int(d["H"])
    eps, delta = float(d["epsilon"]), float(d["delta"])
    rows = list(zip(units.tolist(), cells.tolist()))
    rss0 = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=eps, total_delta=delta)
    engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(noise_kind=pipeline_dp.NoiseKind.GAUSSIAN,
                                         metrics=[pipeline_dp.Metrics.COUNT],
                                         max_partitions_contributed=k * H, max_contributions_per_partition=k)
    extract = pipeline_dp.DataExtractors(privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
                                         value_extractor=lambda r: 0)
    result = engine.aggregate(rows, params, extract, public_partitions=list(range(n_cells)))
    accountant.compute_budgets()
    out = np.zeros(n_cells)
    for cell, metrics in result:
        out[cell] = metrics.count
    # Gaussian sigma PipelineDP calibrates for (eps, delta) with L0 = kH partitions, Linf = k (add/remove)
    from pipeline_dp import dp_computations
    sd = dp_computations.compute_sigma(eps, delta, math.sqrt(k * H) * k)
    return _finish(t0, c0, rss0, out, sd)


RUNNERS = {"privaudit": run_privaudit, "opendp": run_opendp, "pipelinedp": run_pipelinedp}
IMPORTS = {"privaudit": "privaudit", "opendp": "opendp", "pipelinedp": "pipeline_dp"}


def child(tool: str, npz: str, out: str) -> None:
    d = dict(np.load(npz, allow_pickle=False))
    r = RUNNERS[tool](d)
    np.save(out, r.pop("noisy"))
    print(json.dumps(r))


def installed(tool: str) -> bool:
    try:
        __import__(IMPORTS[tool])
    except ImportError:
        return False
    return True


def prepare(episodes: int | None, seed: int, rho: float, delta: float, folder: Path) -> tuple[Path, dict]:
    """Bound the logs once with privaudit; write the rows every tool gets (and the exact counts, for checks)."""
    import privaudit
    from privaudit.data.bounding import unit_column_of
    from privaudit.data.prepare import prepare_logs
    from privaudit.privacy.accounting import zcdp_to_dp
    from privaudit.core.spec import load_spec

    if episodes is None:
        logs, spec_path = privaudit.sample_data().logs, privaudit.sample_data().spec
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_release import make_logs

        logs, spec_path = make_logs(episodes, seed, cache_dir())
    spec = load_spec(spec_path)
    prepared = prepare_logs(logs, spec)
    unit = unit_column_of(prepared.bounded)
    cols = ["step", "state", "action", "next_state"]
    df = prepared.bounded.collect()
    df = df.filter(~df["state"].is_in(list(spec.terminal_states)))  # rows in a terminal state are not counted
    H, S, A = spec.H, spec.S, spec.A
    cells = ((df["step"].to_numpy().astype(np.int64) * S + df["state"].to_numpy()) * A + df["action"].to_numpy())
    units = df[unit].rank("dense").to_numpy().astype(np.int64)
    d = {c: df[c].to_numpy().astype(np.int32) for c in cols}
    d.update(cells=cells, units=units, n_cells=H * S * A, H=H, k=spec.max_episodes_per_unit, rho=rho,
             delta=delta, epsilon=zcdp_to_dp(rho, delta), spec=json.dumps(spec.to_dict()))
    path = folder / "rows.npz"
    np.savez(path, **d)
    exact = np.bincount(cells, minlength=H * S * A)
    return path, {"rows": len(df), "units": int(units.max()) if len(units) else 0, "exact": exact,
                  "epsilon": d["epsilon"], "H": H, "S": S, "A": A}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=None, help="simulate N stays (default: the bundled sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rho", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-6)
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--child", nargs=3, metavar=("TOOL", "NPZ", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    npz, facts = prepare(a.episodes, a.seed, a.rho, a.delta, folder)
    print(f"dense noisy visit counts n_h(s, a): H={facts['H']}, S={facts['S']}, A={facts['A']} "
          f"({facts['H'] * facts['S'] * facts['A']:,} cells), {facts['rows']:,} bounded rows of "
          f"{facts['units']:,} patients (k = 1); rho = {a.rho} (= ({facts['epsilon']:.3f}, {a.delta:g})-DP); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    results = {}
    for tool in a.tools.split(","):
        if not installed(tool):
            hint = {"opendp": "python -m pip install opendp", "pipelinedp": "python -m pip install pipeline-dp"}
            print(f"  {tool}: not installed, skipped ({hint.get(tool, '')})")
            continue
        out = folder / f"{tool}.npy"
        try:
            r = run_child(__file__, tool, npz, out)
        except ChildFailed as e:
            print(f"  {tool}: failed, skipped: {str(e).splitlines()[-1]}")
            continue
        noisy = np.load(out)
        r["measured_sd"] = float(np.std(noisy - facts["exact"]))
        results[tool] = r
    base = results.get("privaudit")
    print(f"  {'tool':10s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS MB':>12s} {'RSS growth MB':>14s} "
          f"{'noise sd':>9s} {'measured':>9s} {'wall x':>7s} {'CPU x':>7s} {'growth x':>9s}")
    for tool, r in results.items():
        ratio = (lambda k: r[k] / base[k] if base and base[k] > 0 else float("nan"))
        print(f"  {tool:10s} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['peak_rss_MB']:12.0f} "
              f"{r['rss_growth_MB']:14.1f} {r['noise_sd']:9.2f} {r['measured_sd']:9.2f} "
              f"{ratio('wall_s'):7.1f} {ratio('cpu_s'):7.1f} {ratio('rss_growth_MB'):9.1f}")
        if "build_s" in r:
            print(f"  {'':10s} (OpenDP: {r['build_s']:.2f} s of the wall time builds the measurement; its map "
                  f"gives rho = {r['rho_map']:.4g} at d_in = 2kH)")
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()


if __name__ == "__main__":
    main()
