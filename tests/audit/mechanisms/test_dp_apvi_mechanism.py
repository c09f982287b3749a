"""The DP-APVI adapter: a full release per run, then the learner; the auditor sees a loud learner."""

from __future__ import annotations

import numpy as np

from privaudit.audit import AuditSettings, make_pair, run_audit
from privaudit.audit.mechanisms.dp_apvi import DPAPVIMechanism
from tests.audit.helpers import tiny_logs, tiny_spec


def test_dp_apvi_outputs_a_policy_and_is_flagged_when_run_with_far_less_noise():
    spec, logs = tiny_spec(), tiny_logs()
    m = DPAPVIMechanism(spec, rho=0.5, delta=1e-5)
    pair = make_pair(logs, spec, "rare", rng=np.random.default_rng(0))
    m.prepare(pair.d, pair.d_prime)
    pi = m(pair.d, np.random.default_rng(0))
    assert pi.shape == (spec.horizon, spec.n_states) and pi.dtype == np.int64
    assert [n for n, _ in m.attack_scores(pair)] == ["policy_follows_canary"]
    # noise="rounded" on purpose: a policy of a rounded-Gaussian release is post-processing of continuous
    # Gaussian noise, so the GDP opt-in is valid (not for the default exact noise)
    loud = DPAPVIMechanism(spec, rho=1e6, delta=1e-5, noise="rounded")  # almost no noise, claims rho = 0.5
    claim_gdp = DPAPVIMechanism(spec, rho=0.5, delta=1e-5, noise="rounded").claim(kind="gaussian")
    r = run_audit(loud, logs, spec, claim=claim_gdp, trials=300, seed=1, progress=False,
                  settings=AuditSettings(n_jobs=1))
    assert r.verdict == "violation", r.data["chosen_event"]
    ok = run_audit(m, logs, spec, claim=m.claim(), trials=300, seed=1, progress=False,
                   settings=AuditSettings(n_jobs=1))
    assert ok.verdict == "no violation found"
