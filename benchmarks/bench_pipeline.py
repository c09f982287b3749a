"""Wall time of ``privaudit pipeline`` on the bundled ICU-Sepsis sample, per stage.

Goal (issue 7): the whole pipeline on the bundled 20,000-episode sample in
under 2 minutes on 2 cores. Run pinned to two cores, e.g.

    taskset -c 0,1 python benchmarks/bench_pipeline.py --repeat 2

Prints, per run, the stage timings the pipeline records in its private log
(private/local-log.json: runtime grows with the size of the private data, so
it never goes into summary.json) and the total wall time including imports
and the temporary-folder rename, then the utility figure (the DP-APVI value
next to the clinicians' and the optimal value).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rho", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--per-step", action="store_true", help="release per step instead of pooled (slow)")
    ap.add_argument("--audit-trials", type=int, default=4000)
    args = ap.parse_args()
    t_import = time.perf_counter()
    from privaudit.pipeline import run_pipeline
    t_import = time.perf_counter() - t_import
    print(f"import privaudit.pipeline: {t_import:.2f} s")
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "run"
            t = time.perf_counter()
            s = run_pipeline(rho=args.rho, out=out, stationary=not args.per_step,
                             audit_trials=args.audit_trials, progress=False)
            wall = time.perf_counter() - t
            tim = json.loads(Path(s["private_log"]).read_text())["timings_s"]
            stages = "  ".join(f"{k} {v:.1f}" for k, v in tim.items() if k != "total")
            p = s["policies"][0]
            print(f"run {i + 1}: wall {wall:.1f} s ({stages})  dp-apvi value {p['value']:.4f} "
                  f"(clinicians {p['clinicians_value']:.4f}, optimal {p['optimal_value']:.4f}); "
                  f"audit eps_lb {s['audit']['epsilon_lower_bound'] if s['audit'] else float('nan'):.3g}")


if __name__ == "__main__":
    main()
