"""A spec's terminal states and public reward against a known MDP (``privaudit.mdp.spec_check``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privaudit.core.errors import SpecError
from privaudit.mdp.icu_sepsis import load_icu_sepsis
from privaudit.mdp.registry import MDP_REGISTRY, build_mdp
from privaudit.mdp.spec_check import check_spec_matches_mdp
from privaudit.mdp.tabular import TabularMDP
from privaudit.core.spec import DomainSpec


@pytest.fixture(scope="module")
def icu():
    return load_icu_sepsis(horizon=20)


def _spec(mdp: TabularMDP, terminals, public=None, reward_range=(0.0, 1.0)) -> DomainSpec:
    doc = {"format_version": 1, "horizon": mdp.horizon, "n_states": mdp.n_states, "n_actions": mdp.n_actions,
           "terminal_states": list(terminals), "reward_range": list(reward_range),
           "privacy_unit": {"column": None, "max_episodes": 1}}
    if public is not None:
        doc["public_reward"] = {"kind": "next_state", "values": {str(k): v for k, v in public.items()}}
    return DomainSpec.from_dict(doc)


@pytest.mark.parametrize("name,options", [("icu-sepsis", {}), ("random-tabular", {"horizon": 4, "states": 5,
                                                                                   "actions": 3}),
                                          ("synthetic-linear", {})])
def test_every_registered_mdp_matches_the_spec_simulate_writes(name, options):
    mdp = build_mdp(name, **options)
    check_spec_matches_mdp(DomainSpec.from_dict(MDP_REGISTRY[name].spec_doc(mdp, "x", None)), mdp, name)


def test_bundled_sample_spec_matches_icu_sepsis(icu, repo_root):
    doc = json.loads((repo_root / "sample_data" / "icu_sepsis_spec.json").read_text())
    check_spec_matches_mdp(DomainSpec.from_dict(doc), icu, "icu-sepsis")


def test_icu_sepsis_reward_on_713_is_refused_with_the_count_of_cells(icu, repo_root):
    """The fresh-user case: 713 (death) declared rewarding instead of 714 (survival)."""
    doc = json.loads((repo_root / "sample_data" / "icu_sepsis_spec.json").read_text())
    doc["public_reward"]["values"] = {"713": 1.0}
    # oracle: with r = 1{s' = 713} the implied expected reward is P(713 | s, a), the MDP's is P(714 | s, a)
    live = icu.P[:713]  # states 713..715 are the terminal ones
    n_bad = int((np.abs(live[:, :, 713] - live[:, :, 714]) > 1e-6).sum())
    assert 0 < n_bad <= 713 * 25
    with pytest.raises(SpecError, match=rf"\$\.public_reward .*'713'.* in {n_bad:,} of {713 * 25:,} "):
        check_spec_matches_mdp(DomainSpec.from_dict(doc), icu, "icu-sepsis")


@pytest.mark.parametrize("terminals,named", [((713, 714), r"\[715\] are terminal in the MDP but not declared"),
                                             ((12, 713, 714, 715), r"\[12\] are terminal in the spec but not")])
def test_terminal_states_must_be_the_mdps(icu, terminals, named):
    spec = _spec(icu, terminals)
    with pytest.raises(SpecError, match=r"\$\.terminal_states .*" + named):
        check_spec_matches_mdp(spec, icu, "icu-sepsis")


def _small(reward_shape: str, rng: np.random.Generator):
    """S=4 (terminal 3), A=2, H=3, per-step P; r(s') public = [0.2, 0.0, 0.7, 1.0]."""
    S, A, H = 4, 2, 3
    P = rng.dirichlet(np.ones(S), size=(H, S, A))
    pub = np.array([0.2, 0.0, 0.7, 1.0])
    if reward_shape == "next_state":
        r = np.broadcast_to(pub, (H, S, A, S)).copy()
    else:  # r_h(s, a) = the expectation of r(s') under P_h: the same values for every policy
        r = P @ pub
    return TabularMDP(P=P, r=r, d0=np.full(S, 0.25), horizon=H, terminal_states=(3,)), pub


@pytest.mark.parametrize("reward_shape", ["next_state", "expected"])
def test_reward_compared_in_expectation_at_the_tolerance_edge(reward_shape):
    rng = np.random.default_rng(3)
    mdp, pub = _small(reward_shape, rng)
    spec = _spec(mdp, (3,), {s: float(v) for s, v in enumerate(pub) if v}, reward_range=(-1.0, 1.0))
    tol = spec.public_reward_tolerance()
    assert tol == pytest.approx(2e-6)
    check_spec_matches_mdp(spec, mdp)  # terminal rows (absorbing, reward 0 vs r(3) = 1) are not compared
    for factor, refused in ((0.9, False), (1.1, True)):
        r = mdp.r.copy()
        if reward_shape == "next_state":
            r[1, 2, 0, :] += factor * tol  # every s' of (h=1, s=2, a=0): its expectation moves by factor * tol
        else:
            r[1, 2, 0] += factor * tol
        other = TabularMDP(P=mdp.P, r=r, d0=mdp.d0, horizon=mdp.horizon, terminal_states=(3,))
        if refused:
            with pytest.raises(SpecError, match=r"in 1 of 18 .*\(h=1, s=2, a=0\)"):
                check_spec_matches_mdp(spec, other, "x.npz")
        else:
            check_spec_matches_mdp(spec, other, "x.npz")


def test_without_public_reward_only_terminals_are_compared():
    mdp, _ = _small("expected", np.random.default_rng(4))
    check_spec_matches_mdp(_spec(mdp, (3,)), mdp)  # any reward: the logs carry it
    with pytest.raises(SpecError, match="terminal"):
        check_spec_matches_mdp(_spec(mdp, ()), mdp)


def test_public_reward_declared_for_a_random_reward_mdp_is_refused():
    mdp = build_mdp("random-tabular", horizon=3, states=4, actions=2, instance_seed=1)
    with pytest.raises(SpecError, match=r"\$\.public_reward .* in 24 of 24 "):
        check_spec_matches_mdp(_spec(mdp, (), {0: 1.0}), mdp, "random-tabular")
