"""Canary pairs and the substitution check."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import polars as pl
import pytest

from privaudit.audit import check_neighbours, make_pair
from privaudit.core.errors import UsageError
from privaudit.core.spec import DomainSpec
from tests.audit.helpers import A, H, S, tiny_logs, tiny_spec


def _check_episode(steps, spec):
    assert [s["h"] for s in steps] == list(range(spec.horizon))
    for a, b in zip(steps, steps[1:]):
        assert a["next_state"] == b["state"]  # a valid chain
    assert all(s["state"] not in spec.terminal_states for s in steps)
    assert all(0 <= s["action"] < spec.n_actions and 0 <= s["state"] < spec.n_states for s in steps)


def test_rare_canary_uses_unvisited_cells_and_ends_at_r_max():
    spec, logs = tiny_spec(), tiny_logs()
    p = make_pair(logs, spec, "rare", rng=np.random.default_rng(0))
    steps = p.description["canary"]["steps"]
    _check_episode(steps, spec)
    assert all(s["state"] == S - 1 for s in steps)  # the only unvisited state
    assert len({(s["state"], s["action"]) for s in steps}) == min(H, A)  # varies across h when it can
    assert steps[-1]["reward"] == 1.0 and all(s["reward"] == 0.0 for s in steps[:-1])
    assert check_neighbours(p.d, p.d_prime)["removed_units"] == 1
    assert p.d_prime["unit_id"].n_unique() == logs["unit_id"].n_unique()
    assert p.d_prime.schema == logs.schema
    assert set(p.description["removed_unit"]) == {"rows"}


def test_pair_description_holds_no_function_of_the_removed_unit_id():
    """An unsalted short hash of an enumerable id is reversible (issue 10 item 6): none is written."""
    spec, logs = tiny_spec(), tiny_logs()
    for strategy in ("rare", "repeat", "random"):
        p = make_pair(logs, spec, strategy, rng=np.random.default_rng(0))
        text = json.dumps(p.description)
        removed = set(logs["unit_id"].to_list()) - set(p.d_prime["unit_id"].to_list())
        assert len(removed) == 1
        (uid,) = removed
        for candidate in (repr(uid), str(uid)):
            assert hashlib.sha256(candidate.encode()).hexdigest()[:12] not in text
        assert "hash" not in p.description["removed_unit"]


def test_rare_canary_with_public_reward_ends_in_the_rewarding_terminal_state():
    doc = tiny_spec().to_dict()
    doc.update({"terminal_states": [3], "public_reward": {"kind": "next_state", "values": {"3": 1.0}}})
    spec = DomainSpec.from_dict(doc)
    logs = tiny_logs().with_columns(terminated=pl.lit(False), truncated=pl.lit(False))
    p = make_pair(logs, spec, "rare", rng=np.random.default_rng(0))
    steps = p.description["canary"]["steps"]
    _check_episode(steps, spec)
    assert steps[-1]["next_state"] == 3 and steps[-1]["reward"] == 1.0
    canary = p.d_prime.filter(pl.col("unit_id") == p.d_prime["unit_id"].max())
    assert canary["terminated"].to_list() == [False] * (H - 1) + [True]


def test_random_canary_depends_on_the_rng_and_is_valid():
    spec, logs = tiny_spec(), tiny_logs()
    a = make_pair(logs, spec, "random", rng=np.random.default_rng(1))
    b = make_pair(logs, spec, "random", rng=np.random.default_rng(2))
    _check_episode(a.description["canary"]["steps"], spec)
    assert a.description["canary"] != b.description["canary"]
    check_neighbours(a.d, a.d_prime)


def test_unknown_strategy_and_empty_logs():
    with pytest.raises(UsageError, match="`canary`"):
        make_pair(tiny_logs(), tiny_spec(), "loud", rng=np.random.default_rng(0))
    with pytest.raises(UsageError, match="empty"):
        make_pair(tiny_logs().head(0), tiny_spec(), "rare", rng=np.random.default_rng(0))


def test_repeat_canary_attains_the_stationary_sensitivity():
    from privaudit.audit.mechanisms.release import ReleaseMechanism

    spec, logs = tiny_spec(), tiny_logs()
    p = make_pair(logs, spec, "repeat", rng=np.random.default_rng(0))
    steps = p.description["canary"]["steps"]
    _check_episode(steps, spec)
    assert len({(s["state"], s["action"], s["next_state"]) for s in steps}) == 1
    m = ReleaseMechanism(spec, rho=0.5, delta=1e-5, stationary=True).prepare(p.d, p.d_prime)
    diff = m.exact_statistics(p.d_prime)["visits"] - m.exact_statistics(p.d)["visits"]
    # the canary adds H to one pooled cell; the removed episode (one cell at every h in the
    # helper logs) removes H from another: L2 = H sqrt(2), the declared stationary sensitivity
    assert np.sqrt((diff ** 2).sum()) == pytest.approx(m.declared_sensitivity()["visits"]["l2"])


def test_reports_of_every_canary_strategy_validate():
    from privaudit.audit import AuditSettings, run_audit
    from privaudit.audit.mechanisms.catalogue import CatalogueMechanism

    spec, logs = tiny_spec(), tiny_logs()
    m = CatalogueMechanism("gaussian", spec)
    for canary in ("rare", "repeat", "random"):
        r = run_audit(m, logs, spec, claim=m.claim(), trials=200, seed=0, progress=False,
                      settings=AuditSettings(canary=canary))
        r.validate()
        assert r.data["neighbouring_pair"]["kind"] == f"canary-{canary}"
