"""The release adapter (and what the built-in adapters share): the library's code path, and the
auditor sees its bugs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privaudit.audit import make_pair, run_audit
from privaudit.audit.mechanisms.dp_apvi import DPAPVIMechanism
from privaudit.audit.mechanisms.release import ReleaseMechanism
from privaudit.core.errors import UsageError
from privaudit.privacy import sensitivity
from tests.audit.helpers import H, tiny_logs, tiny_spec


@pytest.fixture(scope="module")
def pair():
    return make_pair(tiny_logs(), tiny_spec(), "rare", rng=np.random.default_rng(0))


def test_release_view_holds_every_changed_cell_and_declared_sensitivities(pair):
    spec = tiny_spec()
    m = ReleaseMechanism(spec, rho=0.5, delta=1e-5).prepare(pair.d, pair.d_prime)
    s0, s1 = m.exact_statistics(pair.d), m.exact_statistics(pair.d_prime)
    # the rare canary replaces a full episode: H cells -1 and H cells +1 per count family
    for fam in ("visits", "transitions"):
        diff = s1[fam] - s0[fam]
        assert np.count_nonzero(diff) == 2 * H == m.changed_cells[fam]
        assert np.sqrt((diff ** 2).sum()) == pytest.approx(m.declared_sensitivity()[fam]["l2"])
    out = m(pair.d, np.random.default_rng(1), n_runs=5)
    assert out.shape == (5, sum(v.size for v in s0.values())) and out.dtype == np.int64


def test_release_noise_has_the_planned_scale(pair):
    m = ReleaseMechanism(tiny_spec(), rho=0.5, delta=1e-5).prepare(pair.d, pair.d_prime)
    n = 20_000
    out = m(pair.d, np.random.default_rng(2), n_runs=n)
    nv = m.values["d"]["visits"].size
    resid = out[:, :nv] - m.values["d"]["visits"]
    sigma = m.release.families["visits"].scale
    # exact discrete Gaussian (the default, as `privaudit release`): variance sigma^2 (to 1e-30 at this
    # sigma); the sample variance over n*nv draws has relative sd sqrt(2/(n nv)) < 0.3%; tolerance 2%
    # (failure probability ~0)
    assert resid.var() == pytest.approx(sigma ** 2, rel=0.02)


def test_adapters_default_to_the_exact_noise_a_release_draws():
    """The Python adapters test what `privaudit release` releases (exact samplers) unless asked for
    ``rounded``: with the same generator, the default adapter's noise is that of
    ``add_noise(noise="exact")`` and differs from the rounded one."""
    from privaudit.privacy.mechanisms import add_noise

    spec, logs = tiny_spec(), tiny_logs()
    p = make_pair(logs, spec, "synthetic", rng=np.random.default_rng(0))
    for cls in (ReleaseMechanism, DPAPVIMechanism):
        assert cls(spec, rho=0.5, delta=1e-5).noise_mode == "exact"
        assert cls(spec, rho=0.5, delta=1e-5).release.noise == "exact"
    m = ReleaseMechanism(spec, rho=0.5, delta=1e-5).prepare(p.d, p.d_prime)
    r = ReleaseMechanism(spec, rho=0.5, delta=1e-5, noise="rounded").prepare(p.d, p.d_prime)
    out, out_r = m(p.d, np.random.default_rng(4), n_runs=3), r(p.d, np.random.default_rng(4), n_runs=3)
    v = m.values["d"]["visits"]
    first = np.random.default_rng(4).spawn(len(m.values["d"]))[0]  # the visits' stream, as the adapter spawns it
    want = add_noise(np.broadcast_to(v, (3, v.size)).copy(), mechanism="gaussian",
                     scale=m.release.families["visits"].scale, rng=first, noise="exact")
    assert np.array_equal(out[:, :v.size], want)
    assert not np.array_equal(out, out_r)


def test_correct_release_passes_and_an_overspent_release_is_flagged():
    spec, logs = tiny_spec(), tiny_logs()
    m = ReleaseMechanism(spec, rho=0.5, delta=1e-5)
    r = run_audit(m, logs, spec, claim=m.claim(), trials=20_000, seed=5, progress=False)
    assert r.verdict == "no violation found" and r.data["graybox"]["checked"]
    # noise="rounded" on purpose: the GDP opt-in needs continuous Gaussian noise (rounded: a
    # post-processing), which the default exact discrete Gaussian is not
    over = ReleaseMechanism(spec, rho=4.0, delta=1e-5, noise="rounded")  # runs at rho = 4, claims rho = 0.5
    claim_gdp = ReleaseMechanism(spec, rho=0.5, delta=1e-5, noise="rounded").claim(kind="gaussian")
    r = run_audit(over, logs, spec, claim=claim_gdp, trials=20_000, seed=5, progress=False)
    assert r.verdict == "violation" and r.data["method"]["gaussian"]["mu_lower_bound"] > 1
    # the default (generic) test also sees rho = 64 against a claim of 0.5
    huge = ReleaseMechanism(spec, rho=64.0, delta=1e-5)
    r = run_audit(huge, logs, spec, claim=m.claim(), trials=20_000, seed=5, progress=False)
    assert r.verdict == "violation" and r.data["method"]["test"] == "generic"


def test_gdp_opt_in_refused_where_it_is_not_valid():
    spec = tiny_spec()
    for kw in (dict(rho=0.5, delta=1e-5, noise="exact"), dict(epsilon=1.0, mechanism="laplace")):
        with pytest.raises(UsageError, match="GDP test is valid only"):
            ReleaseMechanism(spec, **kw).claim(kind="gaussian")
    assert ReleaseMechanism(spec, rho=0.5, delta=1e-5, noise="exact").claim().kind == "generic"


def test_graybox_sees_a_sensitivity_bug_in_the_library(monkeypatch):
    """Patch the library's count sensitivity to the add/remove value k sqrt(H): the release
    adapter (which calls the library) declares it, and the gray-box check flags it."""
    real = sensitivity.count_sensitivity

    def add_remove(horizon, max_episodes, stationary, family, **kw):
        s = real(horizon, max_episodes, stationary, family, **kw)
        return sensitivity.Sensitivity(l1=s.l1 / 2, l2=s.l2 / math.sqrt(2), family=s.family)

    monkeypatch.setattr(sensitivity, "count_sensitivity", add_remove)
    spec, logs = tiny_spec(), tiny_logs()
    m = ReleaseMechanism(spec, rho=0.5, delta=1e-5)
    r = run_audit(m, logs, spec, claim=m.claim(), trials=1000, seed=0, progress=False)
    assert r.verdict == "violation" and r.data["method"]["test"] == "gray-box"
    assert {f["name"] for f in r.data["graybox"]["families"] if f["exceeds"]} >= {"visits", "transitions"}
