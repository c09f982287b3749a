"""The tabular release mechanism object (privaudit.release.mechanism.TabularRelease)."""

import math
from fractions import Fraction

import numpy as np
import pytest

from privaudit.learners.tabular.dp_apvi import release_noise_bound
from privaudit.privacy.accounting import event_epsilon, event_rho
from privaudit.privacy.budget import resolve_budget
from privaudit.core.spec import load_spec
from privaudit.data import counts
from privaudit.release.mechanism import TabularRelease
from privaudit.release.tabular import ReleaseOptions, load_release, release_logs
from tests._release_logs import random_log, write_spec

H, S, A = 6, 5, 3


@pytest.fixture
def spec(tmp_path):
    return load_spec(write_spec(tmp_path, H=H, S=S, A=A, terminals=(4,)))


def test_gaussian_plan_is_seed_000_eq1_and_costs_the_budget(tmp_path):
    """Visits + transitions, k = 1: sigma^2 = 2H/rho (Qiao & Wang 2023, eq. (1)), rho/2 per family; with rewards
    the three families share one sigma^2 = 3H/rho."""
    public = load_spec(write_spec(tmp_path, "p.json", H=H, S=S, A=A, terminals=(4,), public_reward={3: 1.0}))
    rel = TabularRelease.plan(public, resolve_budget(rho=0.8))
    assert rel.families["visits"].scale ** 2 == pytest.approx(2 * H / 0.8, rel=1e-14)
    assert rel.family_share("visits")["rho"] == pytest.approx(0.4, rel=1e-14)
    assert event_rho(rel.event) <= 0.8 and rel.guarantee()["rho"] == 0.8
    private = load_spec(write_spec(tmp_path, "q.json", H=H, S=S, A=A, terminals=(4,)))
    rel3 = TabularRelease.plan(private, resolve_budget(rho=0.8))
    q = rel3.families["rewards"].quantum
    assert (rel3.families["transitions"].scale ** 2 == pytest.approx(3 * H / 0.8, rel=1e-14)
            and rel3.families["rewards"].scale == rel3.families["visits"].scale * q)


def test_laplace_plan_is_lap_4H_over_eps(spec):
    rel = TabularRelease.plan(spec, resolve_budget(epsilon=2.0, mechanism="laplace"), noise="exact")
    # visits + transitions + rewards, each l1 = 2H: b = 6H / eps (4H/eps without rewards, Qiao & Wang 2023, Section 3)
    assert rel.families["visits"].scale == pytest.approx(6 * H / 2.0, rel=1e-14)
    assert event_epsilon(rel.event) <= 2.0 and rel.guarantee()["epsilon"] == 2.0


def test_event_never_costs_more_than_the_budget(spec):
    """Exact rational cost of the stored-unit event <= budget for many budgets (the plan raises the
    scale ulp by ulp if float rounding would overspend)."""
    rng = np.random.default_rng(0)
    # the scale search does not depend on the noise kind; "exact" also builds each scale's sampler table
    # (~0.2 s per new scale), so it runs on every sixth budget only
    for i, rho in enumerate(10 ** rng.uniform(-6, 3, size=60)):
        for stationary in (False, True):
            rel = TabularRelease.plan(spec, resolve_budget(rho=float(rho)), stationary=stationary,
                                      noise="exact" if i % 6 == 0 else "rounded")
            exact = sum(Fraction(f.l2) ** 2 / (2 * Fraction(f.scale) ** 2) for f in rel.families.values())
            assert exact <= Fraction(float(rho))


def test_apply_draws_what_release_logs_writes(spec, tmp_path):
    """Same seed: the object's apply and the written release hold the same noisy values (one code path)."""
    df = random_log(np.random.default_rng(1), 40, H=H, S=S, A=A, terminals=(4,))
    logs = tmp_path / "logs.parquet"
    df.write_parquet(logs)
    info = release_logs(logs, spec, rho=0.5, out=tmp_path / "r", seed=7)
    written = load_release(tmp_path / "r")
    rel = TabularRelease.plan(spec, resolve_budget(rho=0.5))
    exact = counts.sparse_counts(df.select("step", "state", "action", "next_state", "reward"), spec, rewards=True,
                                 quantum=rel.families["rewards"].quantum)
    noisy = rel.apply(exact, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(noisy.visits, written.visits)
    trans = dict(noisy.transitions)
    np.testing.assert_array_equal(trans[H - 1], written.transitions_at(H - 1))
    assert info.event == rel.event
    # E: one function for the object and for a learner reading the manifest
    assert rel.noise_bound(0.05) == release_noise_bound(info.manifest, 0.05)
    with pytest.raises(Exception, match="stationary"):
        rel.apply(counts.sparse_counts(df, spec, stationary=True), rng=np.random.default_rng(0))


def test_noise_bound_is_seed_000_E_rho(spec):
    rho, fp = 0.5, 0.05
    n = 2 * H * S * S * A
    for noise, rounding in (("rounded", 1.0), ("exact", 0.0)):  # exact discrete Gaussian: no rounding term
        rel = TabularRelease.plan(spec, resolve_budget(rho=rho), noise=noise)
        sigma = rel.families["visits"].scale
        assert rel.noise_bound(fp) == pytest.approx(2 * sigma * math.sqrt(2 * math.log(2 * n / fp)) + rounding,
                                                    rel=1e-12)


def test_negligible_noise_is_warned_not_refused(spec, tmp_path):
    """rho = 1e4 with k = 1, H = 6, three families: sigma = sqrt(3H / rho) = 0.042 counts, below 0.5: warned
    on the echo (stderr in the CLI), released anyway; rho = 1 (sigma 4.2) is not warned."""
    big = TabularRelease.plan(spec, resolve_budget(rho=1e4))
    assert big.count_noise_sd() == pytest.approx(math.sqrt(3 * H / 1e4), rel=1e-12)
    assert "noise is negligible" in big.negligible_noise_warning() and "rho = 10000" in big.negligible_noise_warning()
    assert TabularRelease.plan(spec, resolve_budget(rho=1.0)).negligible_noise_warning() is None
    lap = TabularRelease.plan(spec, resolve_budget(epsilon=1e3, mechanism="laplace"))  # b = 6H/eps = 0.036
    assert lap.count_noise_sd() == pytest.approx(math.sqrt(2) * 6 * H / 1e3) and lap.negligible_noise_warning()
    logs = tmp_path / "logs.parquet"
    random_log(np.random.default_rng(1), 30, H=H, S=S, A=A, terminals=(4,)).write_parquet(logs)
    said = []
    release_logs(logs, spec, rho=1e4, out=tmp_path / "r", options=ReleaseOptions(echo=said.append))
    assert sum("noise is negligible" in t for t in said) == 1 and (tmp_path / "r" / "manifest.json").is_file()
