"""The DP-VAPVI audit adapter: step H-1's noisy statistics through the estimator's own code.

Statistical tests use fixed seeds; at rho = 5 on H = 2 the audited share
(gram + weighted_gram: 2 rho/(5H) = 1 zCDP) is mu = sqrt(2); the broken
variants give mu = 2 (add/remove matrix calibration, sigma_z / sqrt(2)) and
mu = 14 (noise 10x too small). With 20 000 runs per side the GDP lower bound
sits within a few percent of the true mu (run-to-run sd of mu_lb about 0.02
here), so a false alarm for the correct mechanism (mu_lb > sqrt(2)) has
probability below the audit's alpha = 0.05 by construction, and missing
mu = 2 would take a deviation of > 20 sd.
"""

import json
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.audit import run_audit
from privaudit.audit.mechanisms.dp_vapvi import DPVAPVIMechanism
from privaudit.audit.mechanisms.registry import ADAPTERS
from privaudit.audit.mechanisms.dp_vapvi import linear_canary_pair
from privaudit.learners.linear import DPVAPVI
from privaudit.learners.linear import privacy as lp
from privaudit.learners.linear.dp_vapvi import step_statistics
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate, uniform_policy, write_logs
from privaudit.core.spec import DomainSpec, write_spec

MDP = random_tabular_mdp(3, 2, 2, 0)
RHO, TRIALS = 5.0, 20_000


def _spec_doc():
    doc = random_tabular_spec_doc(MDP)
    doc["features"] = {"map": "one-hot"}
    return doc


SPEC = DomainSpec.from_dict(_spec_doc())
LOGS = simulate(MDP, uniform_policy(MDP), 40, np.random.default_rng(1))


def _audit(mech, seed=0):
    # exact discrete Gaussian on a lattice >= 1e4 steps per sigma: the GDP opt-in is valid up to the
    # total-variation share of alpha the runner spends (gaussian_tv_per_run; ~1e-10 here)
    return run_audit(mech, LOGS, SPEC, claim=mech.audited_claim(1e-5, kind="gaussian"), trials=TRIALS, seed=seed)


def test_registered_and_canary_attains_frobenius_sensitivity():
    assert ADAPTERS["dp-vapvi"] is DPVAPVIMechanism
    mech = DPVAPVIMechanism(SPEC, rho=RHO)
    pair = mech.make_pair(LOGS, SPEC, "rare", rng=np.random.default_rng(0))
    assert pair.description["kind"] == "canary-linear"
    mech.prepare(pair.d, pair.d_prime)
    from privaudit.audit.graybox import graybox_check
    gb = graybox_check(mech, pair, 1e-5)
    assert gb["checked"] and not gb["violation"]
    for fam in gb["families"]:  # one-hot: orthogonal unit features, ||phi phi^T - psi psi^T||_F = sqrt(2)
        assert fam["l2"] == pytest.approx(np.sqrt(2)) and fam["declared_l2"] == pytest.approx(np.sqrt(2))
    assert mech.audited_claim(1e-5).rho == pytest.approx(2 * RHO / (5 * SPEC.horizon))


def test_correct_dpvapvi_no_violation_and_tight():
    rep = _audit(DPVAPVIMechanism(SPEC, rho=RHO))
    assert rep.verdict == "no violation found"
    mu_lb = max(e["mu_lower_bound"] for e in rep.to_dict()["events"])
    assert 0.85 * np.sqrt(2) < mu_lb <= np.sqrt(2)  # the audit is nearly tight at mu = sqrt(2)


def _patched_variances(monkeypatch, **factor):
    """The noise actually drawn (lattice variances) scaled by factor[name]^2; the declared scales unchanged."""
    real = lp.lattice_variances

    def broken(scales):
        out = real(scales)
        for name, f in factor.items():
            f2 = Fraction(f) ** 2
            out[name] = tuple(v * f2 for v in out[name]) if isinstance(out[name], tuple) else out[name] * f2
        return out
    monkeypatch.setattr(lp, "lattice_variances", broken)


def test_addremove_matrix_calibration_is_a_violation(monkeypatch):
    # the paper's Z_ij ~ N(0, 1/(4 rho_0)) used for substitution: sigma_z / sqrt(2)
    _patched_variances(monkeypatch, gram=1 / np.sqrt(2), weighted_gram=1 / np.sqrt(2))
    rep = _audit(DPVAPVIMechanism(SPEC, rho=RHO))
    assert rep.verdict == "violation" and rep.exit_code == 3
    assert max(e["mu_lower_bound"] for e in rep.to_dict()["events"]) > np.sqrt(2)


def test_noise_ten_times_too_small_is_a_violation(monkeypatch):
    _patched_variances(monkeypatch, gram=0.1, weighted_gram=0.1, v2=0.1, v=0.1, r_plus_v=0.1)
    rep = run_audit(DPVAPVIMechanism(SPEC, rho=RHO), LOGS, SPEC,
                    claim=DPVAPVIMechanism(SPEC, rho=RHO).audited_claim(1e-5, kind="gaussian"), trials=2000, seed=1)
    assert rep.verdict == "violation"


def test_output_comes_from_the_estimator(monkeypatch):
    """step_release is what the adapter outputs, and what fit computes at h = H-1."""
    mech = DPVAPVIMechanism(SPEC, rho=RHO, statistics=("gram", "weighted_gram", "r_plus_v"))
    pair = mech.make_pair(LOGS, SPEC, "rare", rng=np.random.default_rng(0))
    mech.prepare(pair.d, pair.d_prime)
    calls = []
    real = DPVAPVI.step_release
    monkeypatch.setattr(DPVAPVI, "step_release", lambda self, *a, **k: calls.append(k["n_runs"]) or real(self, *a, **k))
    out = mech(pair.d, np.random.default_rng(3), n_runs=7)
    assert calls == [7] and out.shape == (7, 2 * (15 + 6) + 6)  # d = 6: 2 matrices (15 upper + 6 diag) + r_plus_v
    monkeypatch.undo()
    # batched draws equal the unbatched statistics of fit's code path with the same noise
    data, fmap, H = mech.data["d"], mech.fmap, SPEC.horizon
    sc = mech.learner.noise_scales(H, fmap.dim)
    z = lp.draw_step_noise(np.random.default_rng(9), fmap.dim, sc, n_runs=2)
    st = data.steps[H - 1]
    P = fmap.phi(st.s, st.a)
    batch = step_statistics(st, P, np.zeros(3), stats=lp.LatticeGaussian(sc, z), lam=1.0, cap=1.0,
                            variance_aware=True, n_runs=2)
    one = step_statistics(st, P, np.zeros(3), stats=lp.LatticeGaussian(sc, {k: v[1] for k, v in z.items()}),
                          lam=1.0, cap=1.0, variance_aware=True)
    for k in ("gram", "v2", "v", "weighted_gram", "r_plus_v"):
        np.testing.assert_array_equal(batch[k][1], one[k])  # exact: both are lattice points
    assert np.all(batch["sigma2"] == 1.0)  # Var <= (H - h)^2 = 1 at the last step


def test_sensitivity_bug_in_library_is_caught_by_graybox(monkeypatch):
    real = lp.sensitivities
    monkeypatch.setattr(lp, "sensitivities", lambda H, k=1: {**real(H, k), "gram": 1.0, "weighted_gram": 1.0})
    rep = _audit(DPVAPVIMechanism(SPEC, rho=RHO))
    assert rep.verdict == "violation" and rep.to_dict()["graybox"]["violation"]


def test_linear_canary_pair_is_a_substitution():
    pair = linear_canary_pair(LOGS, SPEC, DPVAPVIMechanism(SPEC, rho=RHO).fmap.table)
    from privaudit.audit.explicit_pairs import check_neighbours
    assert check_neighbours(pair.d, pair.d_prime)["removed_units"] == 1
    steps = pair.description["canary"]["steps"]
    assert len(steps) == SPEC.horizon
    H = SPEC.horizon
    removed = pair.d.join(pair.d_prime, on=pair.d.columns, how="anti")  # the removed unit's rows
    last = removed.filter(removed["step"] == H - 1)
    assert last.height == 1  # the removed unit has a row at the audited step
    c = steps[-1]
    assert (c["state"], c["action"]) != (last["state"][0], last["action"][0])  # orthogonal one-hot features
    lo, hi = SPEC.reward_range
    assert c["reward"] == (lo if last["reward"][0] >= (lo + hi) / 2 else hi)


def test_cli_dp_vapvi(tmp_path):
    from privaudit.cli import main
    write_logs(LOGS, tmp_path / "logs.parquet")
    write_spec(_spec_doc(), tmp_path / "spec.json")
    r = CliRunner().invoke(main, [str(x) for x in (
        "audit", "--mechanism", "dp-vapvi", "--logs", tmp_path / "logs.parquet", "--spec", tmp_path / "spec.json",
        "--claim-rho", RHO, "--trials", 5000, "--seed", 0, "--out", tmp_path / "r.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "no violation found" and "step h=H-1" in doc["mechanism"]
    bad = CliRunner().invoke(main, [str(x) for x in (
        "audit", "--mechanism", "dp-vapvi", "--logs", tmp_path / "logs.parquet", "--spec", tmp_path / "spec.json",
        "--claim-rho", RHO, "--mechanism-rho", 8 * RHO, "--trials", 5000, "--seed", 0, "--out", tmp_path / "b.json",
        "--claim-kind", "gaussian")])
    assert bad.exit_code == 3, bad.output


def test_synthetic_boundary_canary_attains_the_declared_frobenius_sensitivity():
    """On the synthetic-linear map (||phi||^2 <= 7/9, no orthogonal pair) the aimed `rare`
    canary reaches 0.786 of sqrt(2); `synthetic` sets the two step-(H-1) cells of u*, v* to
    e_1, e_2 (on the 2^-12 lattice: rounding toward zero keeps them), and the exact Gram
    change the mechanism computes equals the declared sqrt(2) within the lattice rounding."""
    from privaudit.audit.graybox import graybox_check
    from privaudit.mdp.synthetic_linear import synthetic_linear_mdp, synthetic_linear_spec_doc

    mdp = synthetic_linear_mdp(0, 3)
    spec = DomainSpec.from_dict(synthetic_linear_spec_doc(3))
    logs = simulate(mdp, uniform_policy(mdp), 30, np.random.default_rng(2))
    aimed = DPVAPVIMechanism(spec, rho=RHO)
    pair = aimed.make_pair(logs, spec, "rare", rng=np.random.default_rng(0))
    gb = graybox_check(aimed.prepare(pair.d, pair.d_prime), pair, 1e-5)
    assert max(f["l2"] for f in gb["families"]) < 0.8 * np.sqrt(2)  # the spec's features fall short
    mech = DPVAPVIMechanism(spec, rho=RHO)
    pair = mech.make_pair(logs, spec, "synthetic", rng=np.random.default_rng(0))
    assert pair.description["kind"] == "synthetic"
    from privaudit.audit.explicit_pairs import check_neighbours
    assert check_neighbours(pair.d, pair.d_prime)["removed_units"] == 1
    cells = pair.description["features"]["cells"]
    assert cells["u"] != cells["v"] and np.linalg.norm(mech.fmap.table[tuple(cells["u"])]) == 1.0
    gb = graybox_check(mech.prepare(pair.d, pair.d_prime), pair, 1e-5)
    assert gb["checked"] and not gb["violation"] and len(gb["families"]) == 2
    for fam in gb["families"]:
        assert fam["declared_l2"] == pytest.approx(np.sqrt(2))
        assert abs(fam["l2"] - np.sqrt(2)) <= 4 * 2.0 ** -12  # lattice rounding of the features
    assert pair.description["gram_change"]["l2"] == pytest.approx(np.sqrt(2))


def test_gdp_opt_in_spends_the_lattice_share_of_alpha_and_refuses_a_coarse_lattice(monkeypatch):
    """The GDP test of a lattice Gaussian runs at alpha - 2 n TV (TV from bounds.lattice_gaussian_tv):
    the report records the share; a larger share gives a smaller mu_lb on the same runs (same seed);
    a share above alpha/2 is refused before any run."""
    from privaudit.core.errors import UsageError

    mech = DPVAPVIMechanism(SPEC, rho=RHO)
    tv = mech.gaussian_tv_per_run()
    assert 0 < tv < 1e-12  # sigma is ~1e8 lattice steps here
    claim = mech.audited_claim(1e-5, kind="gaussian")
    rep = run_audit(mech, LOGS, SPEC, claim=claim, trials=2000, seed=3, progress=False)
    lat = rep.data["method"]["gaussian"]["lattice_approximation"]
    n_ev = rep.data["evaluation_trials"]
    assert lat["alpha_spent"] == pytest.approx(2 * n_ev * tv) and lat["joint_test_level"] < 0.05
    # pretend the lattice were coarse: 0.02 of alpha spent -> the joint test at level 0.03, a lower bound
    monkeypatch.setattr(DPVAPVIMechanism, "gaussian_tv_per_run", lambda self: 0.01 / n_ev)
    coarse = run_audit(DPVAPVIMechanism(SPEC, rho=RHO), LOGS, SPEC, claim=claim, trials=2000, seed=3, progress=False)
    assert coarse.data["method"]["gaussian"]["lattice_approximation"]["joint_test_level"] == pytest.approx(0.03)
    assert coarse.data["chosen_event"]["counts"] == rep.data["chosen_event"]["counts"]  # same runs, same event
    assert coarse.data["method"]["gaussian"]["mu_lower_bound"] < rep.data["method"]["gaussian"]["mu_lower_bound"]
    monkeypatch.setattr(DPVAPVIMechanism, "gaussian_tv_per_run", lambda self: 0.02 / n_ev)
    with pytest.raises(UsageError, match="not valid for .*discrete Gaussian"):
        run_audit(DPVAPVIMechanism(SPEC, rho=RHO), LOGS, SPEC, claim=claim, trials=2000, seed=3, progress=False)


def test_cli_dp_vapvi_refuses_rounded_noise(tmp_path):
    from privaudit.cli import main
    write_logs(LOGS, tmp_path / "logs.parquet")
    write_spec(_spec_doc(), tmp_path / "spec.json")
    r = CliRunner().invoke(main, [str(x) for x in (
        "audit", "--mechanism", "dp-vapvi", "--logs", tmp_path / "logs.parquet", "--spec", tmp_path / "spec.json",
        "--claim-rho", RHO, "--noise", "rounded", "--trials", 5000, "--out", tmp_path / "r.json")])
    assert r.exit_code == 2 and "--noise rounded does not apply" in r.output and not (tmp_path / "r.json").exists()
