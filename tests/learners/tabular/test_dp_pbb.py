"""DP-PBB (issue 12): sensitivities by brute force, noise scale = event, coverage of the certificate,
zero noise = the non-private computation, and the time-uniform confidence radius."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.audit.mechanisms.registry import ADAPTERS
from privaudit.cli import main
from privaudit.core.errors import BudgetExceededError
from privaudit.learners.policy import load_policy
from privaudit.learners.options import BudgetRequest, RunContext
from privaudit.learners.tabular.train import train_dp_pbb
from privaudit.pipeline.guarantee import budget_shares, pbb_share_of
from privaudit.privacy.ledger import init_ledger, ledger_status
from privaudit.core.spec import load_spec

from privaudit.core.errors import UsageError
from privaudit.learners.tabular import dp_pbb
from privaudit.learners.confidence import EPOCHS, gaussian_tail, mean_radius, start_mean_lower_bound, stitched_log
from privaudit.learners.tabular import pbb_backup, pbb_noise
from privaudit.learners.tabular.dp_pbb import DPPBB
from privaudit.learners.tabular.pbb_counts import CappedCounts
from privaudit.learners.tabular.pbb_noise import pbb_sensitivities, plan_noise
from privaudit.mdp.tabular import TabularMDP, evaluate_policy
from privaudit.privacy import accounting, fixed_point, samplers


# ----------------------------------------------------------------------------
# a tiny stationary MDP and a fast numpy simulator of capped pooled counts

S, A, H = 5, 2, 4
TERMINALS = (3, 4)          # 3: survival (reward 1 on entering), 4: death


def tiny_mdp() -> TabularMDP:
    P = np.zeros((S, A, S))
    P[0, 0] = [0.50, 0.20, 0.00, 0.20, 0.10]
    P[0, 1] = [0.10, 0.30, 0.10, 0.35, 0.15]
    P[1, 0] = [0.20, 0.40, 0.10, 0.10, 0.20]
    P[1, 1] = [0.00, 0.10, 0.30, 0.40, 0.20]
    P[2, 0] = [0.10, 0.10, 0.30, 0.40, 0.10]
    P[2, 1] = [0.00, 0.20, 0.20, 0.30, 0.30]
    P[3, :, 3] = 1.0
    P[4, :, 4] = 1.0
    r = np.zeros((S, A, S))
    r[:, :, 3] = 1.0
    d0 = np.array([0.5, 0.3, 0.2, 0.0, 0.0])
    return TabularMDP(P=P, r=r, d0=d0, horizon=H, terminal_states=TERMINALS, name="tiny")


BEHAVIOUR = np.array([[0.7, 0.3], [0.6, 0.4], [0.5, 0.5], [0.5, 0.5], [0.5, 0.5]])
REWARD = np.array([0.0, 0.0, 0.0, 1.0, 0.0])


def capped_counts(mdp: TabularMDP, n: int, rng: np.random.Generator, c: int | None = 1) -> CappedCounts:
    """Pooled counts of n episodes of BEHAVIOUR, each episode (= unit, k = 1) capped at c per (s, a)."""
    P = mdp.P
    s = rng.choice(S, size=n, p=mdp.d0)
    starts = np.bincount(s, minlength=S)
    seen = np.zeros((n, S * A), dtype=np.int64)
    N = np.zeros((S * A, S), dtype=np.int64)
    live = np.ones(n, dtype=bool)
    for _ in range(H):
        idx = np.flatnonzero(live)
        if idx.size == 0:
            break
        st = s[idx]
        a = (rng.random(idx.size) < BEHAVIOUR[st, 1]).astype(np.int64)
        cum = np.cumsum(P[st, a], axis=1)
        s2 = np.minimum((rng.random(idx.size)[:, None] > cum).sum(1), S - 1)
        cell = st * A + a
        keep = seen[idx, cell] < (c if c is not None else H)
        seen[idx, cell] += 1
        np.add.at(N, (cell[keep], s2[keep]), 1)
        s[idx] = s2
        live[idx] = ~np.isin(s2, TERMINALS)
    return CappedCounts.from_arrays(N.reshape(S, A, S), horizon=H, max_episodes=1, max_per_cell=c, starts=starts)


# ----------------------------------------------------------------------------
# sensitivities by brute force (substitution of one unit with k episodes, c per cell)


def _episodes(S_, A_, H_):
    """Every episode of 1..H_ steps: ((s_0, a_0, s_1), ..., (s_{L-1}, a_{L-1}, s_L))."""
    out = []
    for L in range(1, H_ + 1):
        for states in itertools.product(range(S_), repeat=L + 1):
            for acts in itertools.product(range(A_), repeat=L):
                out.append(tuple((states[t], acts[t], states[t + 1], t) for t in range(L)))
    return out


def _unit_vectors(S_, A_, H_, k, c, stationary, Wq, m):
    """Per distinct unit (k episodes), after the cap: (visits, first-moment sums of u = Wq(s') - m,
    starts, second-moment sums of u^2)."""
    eps = _episodes(S_, A_, H_)
    out = set()
    for unit in itertools.combinations_with_replacement(range(len(eps)), k):
        G = 1 if stationary else H_
        vis = np.zeros((G, S_ * A_), dtype=np.int64)
        bak = np.zeros((G, S_ * A_), dtype=np.int64)
        sec = np.zeros((G, S_ * A_), dtype=np.int64)
        st = np.zeros(S_, dtype=np.int64)
        for e in unit:
            st[eps[e][0][0]] += 1
            for (s, a, s2, t) in eps[e]:
                g = 0 if stationary else t
                cell = s * A_ + a
                if c is not None and vis[g, cell] >= c:
                    continue
                vis[g, cell] += 1
                bak[g, cell] += Wq[s2] - m
                sec[g, cell] += (Wq[s2] - m) ** 2
        out.add((tuple(vis.ravel()), tuple(bak.ravel()), tuple(st), tuple(sec.ravel())))
    return [tuple(np.array(x) for x in v) for v in out]


def _max_pair_norm(vectors, slices: int = 1):
    """Largest ||y - y'||_2 over all pairs; with ``slices`` > 1, the largest over each slice separately
    (per step, backup h only sums the transitions of step h)."""
    V = np.array(vectors, dtype=np.float64).reshape(len(vectors), slices, -1)
    d = V[:, None] - V[None, :]
    return float(np.sqrt((d * d).sum(-1).max()))


@pytest.mark.parametrize("k,c,stationary,H_", [(1, 1, True, 3), (1, 2, True, 3), (1, None, True, 3),
                                               (2, 1, True, 2), (2, 1, False, 2), (1, None, False, 3)])
def test_sensitivities_brute_force(k, c, stationary, H_):
    """Every DP-PBB statistic's L2 sensitivity formula bounds the largest change of one unit (brute force,
    all substitutions on S = 2, A = 2), and the visits/starts bounds are attained."""
    S_, A_ = 2, 2
    sens = pbb_sensitivities(H_, k, c, stationary)
    best_b = best_2 = 0.0
    # W on the grid [0, X = 6], centre m = 3: |u| <= b_u = 3, u^2 in [0, s_max = 9]. The first-moment norm is
    # convex in W (vertices 0, X); the second moment's extremes are u = 0 (W = m) and |u| = b_u.
    for Wq in itertools.product([0, 3, 6], repeat=S_):
        vecs = _unit_vectors(S_, A_, H_, k, c, stationary, np.array(Wq), 3)
        vis = _max_pair_norm([v[0] for v in vecs])
        st = _max_pair_norm([v[2] for v in vecs])
        G = 1 if stationary else H_
        best_b = max(best_b, _max_pair_norm([v[1] for v in vecs], G))
        best_2 = max(best_2, _max_pair_norm([v[3] for v in vecs], G))
        assert vis <= sens["visits_l2"] + 1e-9
        assert st <= sens["starts_l2"] + 1e-9
    # centred backups: |u| <= b_u = 3 (X = 6, m = 3); formula 2 sqrt(c' M) b_u
    assert best_b <= 2 * math.sqrt(sens["c"] * sens["M"]) * 3 + 1e-9
    assert best_2 <= math.sqrt(2 * sens["c"] * sens["M"]) * 9 + 1e-9
    assert st == pytest.approx(sens["starts_l2"])
    # attained where two units can fill disjoint cells up to c' (a self-loop; or per step, disjoint paths)
    if (k, c, stationary) in ((1, None, True), (2, 1, False), (1, None, False)):
        assert vis == pytest.approx(sens["visits_l2"])
        assert best_2 == pytest.approx(math.sqrt(2 * sens["c"] * sens["M"]) * 9)


# ----------------------------------------------------------------------------
# the noise plan: the event states the scales that are drawn, the cost fits the budget


def test_plan_event_fits_budget_and_matches_drawn_scales(monkeypatch):
    rho = 0.37
    plan = plan_noise(rho, horizon=H, n_states=S, max_episodes=1, max_per_cell=1, stationary=True,
                      backup_ranges=[1.0] * H)
    cost = accounting.event_rho(plan.event)
    assert cost <= rho and cost == pytest.approx(rho, rel=1e-9)
    drawn = []
    real = pbb_noise.fixed_point.exact_gaussian

    def spy(sigma, n, *, rng):
        drawn.append(sigma)
        return real(sigma, n, rng=rng)

    monkeypatch.setattr(pbb_noise.fixed_point, "exact_gaussian", spy)
    counts = capped_counts(tiny_mdp(), 200, np.random.default_rng(0))
    learner = DPPBB(rho=rho).fit(counts, REWARD, terminal_states=TERMINALS, return_bound=1.0,
                                 rng=np.random.default_rng(1), seeded=True)
    leaves = [(e.family, e.sigma, e.l2) for e in learner.event_.events]
    assert sorted(drawn) == sorted(s for _, s, _ in leaves)          # every drawn scale is in the event, once
    assert learner.guarantee_["rho"] == pytest.approx(rho)
    fam = [f for f, _, _ in leaves]
    assert fam.count("pbb-backup") == H and fam.count("pbb-second-moment") == H
    assert learner.policy_.privacy.private is False               # seeded: not private
    # the policy states what its sampler delivers, as a release does: exact, TV 0, no extra delta
    sampler = learner.policy_.privacy.guarantee["sampler"]
    assert sampler["total_variation_per_draw"] == 0 and sampler["extra_delta"] == 0


def test_visit_noise_has_the_planned_scale():
    """Empirical sd of the released visit noise over many cells matches the plan (fixed seed).

    4,000 draws of N_Z(0, sigma^2): the sample sd is within 6% of sigma except with probability
    < 1e-6 (chi-square, sd of s/sigma ~ 1/sqrt(2n) = 0.011)."""
    big_S = 80
    N = np.zeros((big_S * 25, big_S), dtype=np.int64)
    cc = CappedCounts((N,), None, 2, 1, 1, "episode_id", True)
    reward = np.zeros(big_S)
    L = DPPBB(rho=0.5, split={"visits": 0.5, "backups": 0.5}).fit(cc, reward, rng=np.random.default_rng(3))
    noise = L.visits_noisy_.ravel()
    assert noise.size == big_S * 25
    assert np.std(noise) == pytest.approx(L.plan_.sigma_visits, rel=0.06)


def test_policy_names_the_exact_samplers_its_noise_came_from(monkeypatch):
    """S A = 2,000 cells: the visit counts (sigma ~ 3, 2,000 draws >= 16 T) come from the table sampler, the
    backups (sigma in the thousands, T in the tens of thousands) by exact rejection; the policy's sampler
    statement names exactly the samplers that ran (watched here at the functions that draw)."""
    ran = set()
    table, rejection = fixed_point.exact_noise, fixed_point.discrete_gaussian_batch
    monkeypatch.setattr(fixed_point, "exact_noise", lambda mech, *a, **k: (mech == "gaussian" and ran.add("table"))
                        or table(mech, *a, **k))
    monkeypatch.setattr(fixed_point, "discrete_gaussian_batch", lambda *a, **k: ran.add("rejection")
                        or rejection(*a, **k))
    big_S = 80
    N = np.zeros((big_S * 25, big_S), dtype=np.int64)
    cc = CappedCounts((N,), None, 2, 1, 1, "episode_id", True)
    L = DPPBB(rho=0.5).fit(cc, np.zeros(big_S), rng=np.random.default_rng(3), seeded=True)
    assert ran == {"table", "rejection"}
    got = L.policy_.privacy.guarantee["sampler"]
    assert got == samplers.noise_statement("exact", paths=ran)
    assert "alias table" in got["sampler"] and "Algorithm 3" in got["sampler"] and got["extra_delta"] == 0.0
    ran.clear()  # a small domain: every scale drawn by rejection, and the statement says only that
    L = DPPBB(rho=0.37).fit(capped_counts(tiny_mdp(), 200, np.random.default_rng(0)), REWARD,
                            terminal_states=TERMINALS, return_bound=1.0, rng=np.random.default_rng(1), seeded=True)
    assert ran == {"rejection"}
    assert L.policy_.privacy.guarantee["sampler"] == samplers.noise_statement("exact", paths={"rejection"})


def test_budget_too_small_is_refused():
    with pytest.raises(UsageError, match="too small"):
        plan_noise(1e-12, horizon=20, n_states=716, max_episodes=1, max_per_cell=1, stationary=True,
                   backup_ranges=[1.0] * 20)


# ----------------------------------------------------------------------------
# zero noise: the non-private computation, checked against a slow reference


def test_zero_noise_is_the_exact_lower_bound():
    """rho = inf: Q at the last step is the lower bound of the exact empirical mean that is uniform over
    value functions (time-uniform Hoeffding on every subset of next states, log term + S log 2;
    recomputed here cell by cell), and a huge finite rho gives the same policy."""
    mdp = tiny_mdp()
    counts = capped_counts(mdp, 3000, np.random.default_rng(5))
    L = DPPBB(rho=math.inf, split={"visits": 1, "backups": 1, "starts": 0.1}, n_backups=1).fit(
        counts, REWARD, terminal_states=TERMINALS, return_bound=1.0)
    N = counts.transitions[0].toarray()
    n_events = 1 * S * A + 3 * S * A + 4              # K = 1 noise event, 2 count + 1 uniform per cell, 4 starts
    Lg = stitched_log(0.05 / n_events) + S * math.log(2.0)
    for cell in range(S * A):
        s = cell // A
        if s in TERMINALS:
            continue
        n = N[cell].sum()
        mean = (N[cell] * np.floor(REWARD * 1000) / 1000).sum() / n
        # Hoeffding time-uniform radius by hand: epoch j = floor(log2 n), t0 = 2^(j + 1/2), v = 1/4
        def d(t, j):
            t0 = 2 ** (j + 0.5)
            return math.sqrt(t0 * 0.25 * Lg / 2) / t + math.sqrt(0.25 * Lg / (2 * t0))
        j = math.floor(math.log2(n))
        rad = max(d(n, j), d(2 ** (j + 1), j + 1))
        want = min(max(mean - rad, 0.0), 1.0)
        assert L.Q_[H - 1, s, cell % A] == pytest.approx(want, abs=1e-12)
    L2 = DPPBB(rho=1e4, split={"visits": 1, "backups": 1, "starts": 0.1}, n_backups=1).fit(
        counts, REWARD, terminal_states=TERMINALS, return_bound=1.0, rng=np.random.default_rng(0))
    np.testing.assert_allclose(L2.Q_, L.Q_, atol=1e-3)
    np.testing.assert_array_equal(L2.policy_.table, L.policy_.table)
    assert L.event_ is None and L.policy_.privacy.private is False


# ----------------------------------------------------------------------------
# coverage of the certificate


def test_certificate_coverage_tiny_mdp(monkeypatch):
    """60 runs (fixed seed) on the tiny MDP, 2,000 and 20,000 episodes, rho in {0.5, 5}: the certificate
    (with the public d0, and from the private start counts) does not exceed the learned policy's exact value
    more often than the failure probability allows.

    The learner's bounds fail w.p. <= failure_prob = 0.05 per run, so more than 9 failures in 60 runs has
    probability < 1e-3 under the claim (binomial tail); the union bounds make failures far rarer. The test
    has power: the same learner with its confidence widths and noise margins set to 0 (a broken, plug-in
    certificate) exceeds the true value in far more runs, and the real certificate is not vacuous."""
    mdp = tiny_mdp()
    runs = [(n, rho) for n in (2000, 20000) for rho in (0.5, 5.0) for _ in range(15)]

    def coverage():
        rng = np.random.default_rng(2026)
        fails = fails_private = positive = 0
        for n, rho in runs:
            counts = capped_counts(mdp, n, rng)
            L = DPPBB(rho=rho).fit(counts, REWARD, terminal_states=TERMINALS, return_bound=1.0, rng=rng)
            v = evaluate_policy(mdp, L.policy_.table)
            cert = L.certified_value(mdp.d0)
            fails += cert > v + 1e-12
            fails_private += L.certified_value() > v + 1e-12
            positive += cert > 0.05
        return fails, fails_private, positive

    fails, fails_private, positive = coverage()
    assert fails <= 9 and fails_private <= 9
    assert positive >= len(runs) // 2
    monkeypatch.setattr(pbb_backup, "mean_radius", lambda n, v, b, L: np.zeros(np.shape(n)))
    monkeypatch.setattr(dp_pbb, "gaussian_tail", lambda alpha: 0.0)
    broken, _, _ = coverage()
    assert broken >= 20


# ----------------------------------------------------------------------------
# the confidence radius


def test_one_start_margin_serves_dp_pbb_and_the_pipeline():
    """DP-PBB's certified_value() without d0 and pipeline.values.start_lower_bound are the same margin
    (learners.confidence.start_mean_lower_bound), checked against a hand computation: Hoeffding over privacy
    units of k episodes (k width sqrt(n_up L / 2), L = log(1/beta) + S log 2, uniform over W); a negative
    numerator divides by the lower bound of N (min of the two quotients)."""
    from privaudit.pipeline.values import start_lower_bound
    W, m, sigma = np.array([1.0, 0.5, 0.0]), np.array([600.0, 400.0, 0.0]), 4.0
    t, t2, lt = gaussian_tail(0.01 / 3), gaussian_tail(0.01 / 6), math.log(3 / 0.01)
    n_lo, n_up = 1000.0 - t2 * sigma * math.sqrt(3), 1000.0 + t2 * sigma * math.sqrt(3)
    for k in (1, 5):
        num = 800.0 - t * sigma * math.sqrt(1.25) - k * math.sqrt(n_up * (lt + 3 * math.log(2)) / 2)
        want = num / n_up
        got = start_mean_lower_bound(W, m, sigma, 1.0, max_episodes=k, t=t, t_total=t2, log_term=lt)
        assert got == pytest.approx(want, rel=1e-12)
    assert 0.65 < start_mean_lower_bound(W, m, sigma, 1.0, max_episodes=1, t=t, t_total=t2, log_term=lt) < 0.8
    # the pipeline: declared units [lo, hi], terminal states dropped, failure 0.01 split 1/3, 1/6 + 1/6, 1/3
    assert start_lower_bound(2.0 * W - 1.0, m, sigma, (-1.0, 1.0), (), max_episodes=5) == pytest.approx(
        -1.0 + start_mean_lower_bound(2.0 * W, m, sigma, 2.0, max_episodes=5, t=t, t_total=t2, log_term=lt),
        rel=1e-12)
    kw = dict(max_episodes=1, t=t, t_total=t2, log_term=lt)
    assert start_mean_lower_bound(W, np.array([0.3, 0.2, 0.0]), sigma, 1.0, **kw) == 0.0  # N < 1
    neg = start_mean_lower_bound(W, np.array([-5.0, 0.0, 1000.0]), sigma, 1.0, **kw)
    assert neg == 0.0  # clipped: the numerator is negative
    # DP-PBB: certified_value() is the shared margin of its own V_0, noisy starts and per-event alpha
    mdp = tiny_mdp()
    L_ = DPPBB(rho=5.0).fit(capped_counts(mdp, 2000, np.random.default_rng(1)), REWARD, terminal_states=TERMINALS,
                            return_bound=1.0, rng=np.random.default_rng(2))
    direct = start_mean_lower_bound(L_.V_[0], L_.starts_noisy_, L_.plan_.sigma_starts, L_.ranges_[0][1],
                                    max_episodes=L_.plan_.unit.k, t=L_._t_gauss, t_total=L_._t_gauss,
                                    log_term=math.log(1 / L_.alpha_event_))
    assert L_.certified_value() == pytest.approx(float(L_.reward_frame_.declared(np.array(direct), mdp.horizon)))
    assert L_.certified_value() <= L_.certified_value(mdp.d0) + 0.2


def test_mean_radius_is_time_uniform():
    """Bernoulli(0.3) streams of 4,000 samples, 400 streams: with alpha = 0.2 the boundary
    mean_n - mu >= r(n) is crossed at some n <= 4000 in at most 110 streams (P[Bin(400, 0.2) > 110] < 1e-4).
    Fixed-n Hoeffding radii at the same alpha are crossed far more often (checked to show power)."""
    rng = np.random.default_rng(11)
    L = stitched_log(0.2)
    n = np.arange(1, 4001)
    rad_h = mean_radius(n, 0.25, 0.0, L)
    rad_b = mean_radius(n, 0.21, 1.0, L)
    cross_h = cross_b = cross_fixed = 0
    fixed = np.sqrt(math.log(1 / 0.2) / (2 * n))
    for _ in range(400):
        x = rng.random(4000) < 0.3
        m = np.cumsum(x) / n
        cross_h += bool(np.any(m - 0.3 >= rad_h))
        cross_b += bool(np.any(0.3 - m >= rad_b))
        cross_fixed += bool(np.any(m - 0.3 >= fixed))
    assert cross_h <= 110 and cross_b <= 110
    assert cross_fixed > 110


def test_mean_radius_monotone_and_edge_cases():
    L = stitched_log(1e-6)
    n = np.arange(1, 10 ** 5, 7)
    r = mean_radius(n, 0.25, 0.0, L)
    assert np.all(np.diff(r) <= 1e-15)
    assert np.all(mean_radius(n, 0.1, 0.0, L) <= r)
    assert mean_radius(0.5, 0.25, 0.0, L) == np.inf
    # at the epoch centre the leading term is the fixed-n Bernstein deviation sqrt(2 v L / n)
    t0 = 2 ** 10.5
    assert mean_radius(t0, 0.25, 0.0, L) >= math.sqrt(2 * 0.25 * L / t0)
    assert EPOCHS == 48 and gaussian_tail(math.exp(-2)) == pytest.approx(2.0)


# ----------------------------------------------------------------------------
# from Parquet logs: train_dp_pbb, the CLI, the ledger, the audit adapter

SAMPLE = Path(__file__).resolve().parents[3] / "sample_data"


@pytest.fixture(scope="module")
def small_logs(tmp_path_factory):
    """2,000 stays of the bundled ICU-Sepsis sample and its spec (public reward, return bound [0, 1])."""
    d = tmp_path_factory.mktemp("pbb")
    df = pl.read_parquet(SAMPLE / "icu_sepsis_clinicians_20k.parquet")
    ids = df["episode_id"].unique().sort()[:2000]
    df.filter(pl.col("episode_id").is_in(ids.implode())).write_parquet(d / "logs.parquet")
    return d / "logs.parquet", load_spec(SAMPLE / "icu_sepsis_spec.json")


def test_train_from_logs_charges_the_ledger_with_the_event(small_logs, tmp_path):
    logs, spec = small_logs
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, spec.dataset_id, 1.0)
    run = train_dp_pbb(logs, spec, budget=BudgetRequest(rho=0.6), seed=3, context=RunContext(ledger=ledger))
    L = run.learner
    assert run.max_per_cell == 1 and L.plan_.sens["c"] == 1
    assert ledger_status(ledger)["rho_spent_float"] == pytest.approx(0.6, rel=1e-12)
    assert accounting.event_rho(L.event_) <= 0.6
    assert all(e.max_per_cell == (None if e.family == "pbb-starts" else 1) for e in L.event_.events)
    pol = L.policy_
    assert pol.algorithm == "dp-pbb" and pol.privacy.private is False   # seeded: not private
    assert pol.parameters["return_bound"] == 1.0 and pol.table.shape == (spec.H, spec.S, spec.A)
    assert 0.0 <= L.certified_value() <= 1.0
    with pytest.raises(BudgetExceededError):          # 0.6 + 0.6 > 1: refused before any row is read
        train_dp_pbb(logs, spec, budget=BudgetRequest(rho=0.6), context=RunContext(ledger=ledger))
    assert ledger_status(ledger)["rho_spent_float"] == pytest.approx(0.6, rel=1e-12)


def test_cli_train_dp_pbb_and_refusals(small_logs, tmp_path):
    logs, _ = small_logs
    spec = SAMPLE / "icu_sepsis_spec.json"
    base = ["train", str(logs), "--spec", str(spec), "--algo", "dp-pbb"]
    res = CliRunner().invoke(main, base + ["--rho", "0.5", "--seed", "1", "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    assert load_policy(tmp_path / "p").algorithm == "dp-pbb"
    for extra, msg in ((["--out", str(tmp_path / "q")], "give a budget"),
                       (["--rho", "1", "--noise", "exact", "--out", str(tmp_path / "q")], "--noise does not apply"),
                       (["--rho", "1", "--mechanism", "laplace", "--out", str(tmp_path / "q")], "Gaussian")):
        res = CliRunner().invoke(main, base + extra)
        assert res.exit_code == 2 and msg in res.output, res.output
    res = CliRunner().invoke(main, ["train", str(logs), "--spec", str(spec), "--algo", "apvi", "--max-per-cell", "1",
                                    "--out", str(tmp_path / "q")])
    assert res.exit_code == 2 and "--max-per-cell applies to --algo dp-pbb" in res.output


def test_audit_adapter_runs_the_learner_and_claims_its_event(small_logs):
    logs, spec = small_logs
    df = pl.read_parquet(logs)
    ids = df["episode_id"].unique().sort()
    d = df.filter(pl.col("episode_id").is_in(ids[:200].implode()))
    d2 = df.filter(pl.col("episode_id").is_in(ids[1:201].implode()))
    mech = ADAPTERS["dp-pbb"](spec, rho=0.5, stationary=True, view="policy").prepare(d, d2)
    out = mech(d, np.random.default_rng(0))
    assert out.shape == (spec.H, spec.S) and out.dtype == np.int64
    assert mech(d, np.random.default_rng(0), n_runs=2).shape == (2, spec.H, spec.S)
    assert mech.claim().rho == pytest.approx(0.5)
    with pytest.raises(UsageError, match="GDP"):
        mech.claim("gaussian")


def test_pipeline_share_of_dp_pbb_leaves_the_release_a_part():
    """The pipeline gives DP-PBB 0.6 of the budget alone, less next to DP-VAPVI, none without a public reward."""
    assert pbb_share_of(True, linear=False, value_share=0.1) == pytest.approx(0.6)
    assert pbb_share_of(False, linear=False, value_share=0.1) == 0.0
    for lin, vs in ((0.5, 0.1), (0.8, 0.1), (0.3, 0.0), (0.1, 0.5)):
        p = pbb_share_of(True, linear=True, linear_share=lin, value_share=vs)
        shares = budget_shares(linear=True, linear_share=lin, value_share=vs, pbb_share=p)
        assert 0 < shares["dp-pbb"] < shares["release"] + shares["dp-pbb"] and shares["release"] > 0
        assert sum(shares.values()) == pytest.approx(1.0)
        assert sum(Fraction(repr(v)) for v in shares.values()) == 1  # exact decimals (not 0.30000000000000004)
    # next to DP-VAPVI's default 0.5 and the value's 0.1: two thirds of 0.4, rounded down to two digits
    assert budget_shares(linear=True, linear_share=0.5, value_share=0.1,
                         pbb_share=pbb_share_of(True, linear=True, linear_share=0.5, value_share=0.1)) == {
        "release": 0.14, "dp-pbb": 0.26, "dp-vapvi": 0.5, "behaviour-value": 0.1}
