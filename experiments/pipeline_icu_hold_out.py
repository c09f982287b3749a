"""``privaudit pipeline --hold-out`` on 1M simulated ICU-Sepsis stays: the certifiable setting (issue 28, item 4).

Reproduce (about 6 minutes to simulate and write the logs, then 1-2 minutes per pipeline run on the shared
2-core machine)::

    python experiments/pipeline_icu_hold_out.py --seed 2031 --fractions 0.2 0.3
    python experiments/pipeline_icu_hold_out.py --seed 2033 --certify --epsilons 5 1   # the pre-registered preset

Simulates ``--stays`` stays of the clinicians' policy (seed ``--seed``, one stay per unit), writes them to
Parquet, and runs the pipeline on them, per held-out fraction, with ``--epsilon 5 --delta 1e-6 --mdp
icu-sepsis --hold-out --hold-out-fraction F --dp-apvi-c2 0 --pbb-share 0 --audit-trials 0`` (noise from OS
entropy: the pipeline is run as a hospital would); ``--certify``: with ``pipeline.config.CERTIFY_PRESET`` (the
same flags at F = 0.3, as ``pipeline --certify``). Prints one JSON line per run and writes them, with each run's
public ``summary.json``, to ``experiments/results/pipeline_icu_hold_out[_certify]_<stays>_seed<S>.json`` (the
first runs: ``pipeline_icu_hold_out_seed2031.json``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from privaudit.mdp.icu_sepsis import clinicians_policy, load_icu_sepsis
from privaudit.mdp.simulate import simulate, write_logs
from privaudit.pipeline import run_pipeline
from privaudit.pipeline.config import CERTIFY_PRESET

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=2031)
    p.add_argument("--stays", type=int, default=1_000_000)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.2, 0.3])
    p.add_argument("--epsilons", type=float, nargs="+", default=[5.0])
    p.add_argument("--certify", action="store_true", help="the preset (pipeline --certify) instead of --fractions")
    a = p.parse_args(argv)
    runs = ([(eps, CERTIFY_PRESET) for eps in a.epsilons] if a.certify else
            [(eps, dict(hold_out=True, hold_out_fraction=f, dp_apvi_c2=0.0, pbb_share=0.0))
             for eps in a.epsilons for f in a.fractions])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        logs = write_logs(simulate(load_icu_sepsis(), clinicians_policy(), a.stays, np.random.default_rng(a.seed)),
                          Path(tmp) / "logs.parquet")
        print(f"simulated and written in {time.time() - t0:.0f} s", flush=True)
        for eps, flags in runs:
            t1 = time.time()
            s = run_pipeline(logs, ROOT / "sample_data" / "icu_sepsis_spec.json", epsilon=eps, delta=1e-6,
                             out=Path(tmp) / f"run{len(rows)}", mdp="icu-sepsis", audit_trials=0, **flags)
            c = s["held_out_certification"]["policies"]["dp-apvi"]
            row = {"stays": a.stays, "seed": a.seed, "epsilon": eps, "hold_out": flags["hold_out_fraction"],
                   "certify_preset": bool(a.certify),
                   "value": s["policies"][0]["value"], "lower_bound": c["lower_bound"], "coverage": c["coverage"],
                   "clinicians_interval": s["held_out_certification"]["clinicians_interval"],
                   "improvement_certified": c["improvement_certified"], "seconds": round(time.time() - t1),
                   "summary": s}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "summary"}), flush=True)
    tag = f"_certify_{a.stays}" if a.certify else f"_{a.stays}"
    out = ROOT / "experiments" / "results" / f"pipeline_icu_hold_out{tag}_seed{a.seed}.json"
    out.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
