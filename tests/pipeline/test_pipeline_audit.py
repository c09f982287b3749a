"""The pipeline's audit depends on no real unit (issue 10 item 1).

Every audit number the pipeline marks as shareable (the ``audit`` part of
``summary.json``, the audit section of ``report.md``, the stdout line,
``figures/audit_tradeoff.png`` and ``audit/audit_report.json``) must be the
same for two neighbouring logs run with the same seed: the audit runs the
release's code path on a synthetic pair built from the spec
(``privaudit.audit.synthetic_pairs.synthetic_pair``), never on the logs. Before
this, the audit replaced the heaviest real unit by a canary, so its bound
was a non-DP function of one real patient.
"""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.audit.explicit_pairs import check_neighbours
from privaudit.audit.synthetic_pairs import synthetic_pair, synthetic_units
from privaudit.cli import main
from privaudit.core.errors import UsageError
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import behaviour_policy, simulate, write_logs
from privaudit.privacy.sensitivity import count_sensitivity
from privaudit.core.spec import DomainSpec


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory):
    """The review's pair: in D every stay has 2 steps; D' differs in one unit, whose stay has H = 4.

    On the audit that replaced the heaviest real unit, the pair it built (and
    so the bound it printed) changed with that one patient."""
    d = tmp_path_factory.mktemp("pipeline_audit")
    mdp = random_tabular_mdp(5, 3, 4, instance_seed=2)
    (d / "spec.json").write_text(json.dumps(random_tabular_spec_doc(mdp, dataset_id="rt-audit")))
    full = simulate(mdp, behaviour_policy("mix:0.5", mdp), 600, np.random.default_rng(5))
    first = full["unit_id"][0]
    short = full.filter(pl.col("step") < 2).with_columns(truncated=pl.col("step") == 1)
    d1 = pl.concat([short.filter(pl.col("unit_id") != first), full.filter(pl.col("unit_id") == first)])
    assert check_neighbours(short, d1)["kind"] == "explicit"   # a real substitution of one unit
    write_logs(short, d / "d.parquet")
    write_logs(d1, d / "d1.parquet")
    return d


def _run(d, logs, name, *extra):
    out = d / name
    res = CliRunner().invoke(main, ["pipeline", str(d / logs), "--spec", str(d / "spec.json"), "--rho", "1",
                                    "--out", str(out), "--seed", "77", "--audit-trials", "400", *extra])
    assert res.exit_code == 0, res.output
    return out, res.output


@pytest.mark.parametrize("layout", ["--per-step", "--stationary"])
def test_shareable_audit_numbers_identical_on_neighbouring_logs(neighbours, layout):
    runs = [_run(neighbours, logs, f"{logs}{layout}", layout) for logs in ("d.parquet", "d1.parquet")]
    (o0, out0), (o1, out1) = runs
    s0, s1 = (json.loads((o / "summary.json").read_text()) for o in (o0, o1))
    assert s0["audit"] == s1["audit"] and s0["audit"]["epsilon_lower_bound"] is not None
    # the release itself differs (the logs do): the identity is not a frozen output
    assert (o0 / "release" / "visits.parquet").read_bytes() != (o1 / "release" / "visits.parquet").read_bytes()
    sect = [(o / "report.md").read_text().split("## Audit of the release")[1].split("## Files")[0] for o in (o0, o1)]
    assert sect[0] == sect[1]
    line = [next(x for x in out.splitlines() if x.strip().startswith("audit")) for out in (out0, out1)]
    assert line[0] == line[1]
    assert (o0 / "figures/audit_tradeoff.png").read_bytes() == (o1 / "figures/audit_tradeoff.png").read_bytes()
    r0, r1 = (json.loads((o / "audit/audit_report.json").read_text()) for o in (o0, o1))
    assert "runtime_s" not in r0 and "runtime_s" not in r1  # no timing side channel in a shareable report
    assert r0 == r1
    assert r0["shareable"] is True and "empty baseline" in r0["shareable_reason"]  # says so itself
    assert r0["neighbouring_pair"]["kind"] == ("synthetic-repeat" if layout == "--stationary" else "synthetic")
    # the pair attains the declared sensitivity of every released family (gray-box check)
    for fam in r0["graybox"]["families"]:
        assert fam["l2"] == pytest.approx(fam["declared_l2"], rel=1e-12)
        assert fam["l1"] == pytest.approx(fam["declared_l1"], rel=1e-12)


def _spec(H=5, S=4, A=2, k=3, terminal=(), public_reward=None):
    doc = {"format_version": 1, "dataset_id": "t", "horizon": H, "n_states": S, "n_actions": A,
           "terminal_states": list(terminal), "reward_range": [-1.0, 2.0],
           "privacy_unit": {"column": "patient", "max_episodes": k}}
    if public_reward is not None:
        doc["public_reward"] = public_reward
    return DomainSpec.from_dict(doc)


@pytest.mark.parametrize("pooled", [False, True])
def test_synthetic_units_attain_the_declared_sensitivity_by_hand(pooled):
    """Exact counts by hand (np.add.at over the rows) against count_sensitivity's formulas."""
    H, S, A, k = 5, 4, 2, 3
    spec = _spec(H, S, A, k, terminal=(3,))
    u, v = synthetic_units(spec, pooled)
    assert u.height == v.height == k * H and u["unit_id"].n_unique() == v["unit_id"].n_unique() == 1
    assert u["episode_id"].n_unique() == v["episode_id"].n_unique() == k
    assert not set(u["state"]) & {3} and not set(v["state"]) & {3}      # no terminal state visited
    for f in (u, v):  # each episode is a walk: its next state is the next step's state
        e = f.filter(pl.col("episode_id") == f["episode_id"][0])
        assert e["next_state"][:-1].to_list() == e["state"][1:].to_list()
        assert (f["reward"] == 2.0).all()                               # r_max: scaled reward 1
    change = {}
    for name, shape, cols in (("visits", (H, S, A), ["step", "state", "action"]),
                              ("transitions", (H, S, A, S), ["step", "state", "action", "next_state"])):
        n = [np.zeros(shape) for _ in range(2)]
        for arr, f in zip(n, (u, v)):
            np.add.at(arr, tuple(f[c].to_numpy() for c in cols), 1.0)
        diff = n[1] - n[0]
        if pooled:
            diff = diff.sum(axis=0)
        change[name] = (np.abs(diff).sum(), np.sqrt((diff ** 2).sum()))
        sens = count_sensitivity(H, k, pooled, name)
        assert change[name][0] == pytest.approx(sens.l1) and change[name][1] == pytest.approx(sens.l2)
    if not pooled:  # v*'s cell at step h is u*'s cell at step h + 1 (noise shared across h is visible)
        cu = list(zip(u["state"][:H], u["action"][:H]))
        cv = list(zip(v["state"][:H], v["action"][:H]))
        assert cv[:-1] == cu[1:] and all(a != b for a, b in zip(cu, cv))


def test_synthetic_pair_on_logs_is_a_substitution_pair(neighbours):
    spec = DomainSpec.from_dict(json.loads((neighbours / "spec.json").read_text()))
    logs = pl.read_parquet(neighbours / "d.parquet")
    pair = synthetic_pair(spec, pooled=False, logs=logs)
    assert check_neighbours(pair.d, pair.d_prime) == {"kind": "explicit", "relation": "substitution",
                                                      "removed_units": 1, "added_units": 1}
    assert pair.d.height == logs.height + spec.horizon and pair.description["baseline"] == "logs"
    assert synthetic_pair(spec, pooled=True).description["baseline"] == "empty"


def test_a_spec_with_one_cell_is_refused():
    with pytest.raises(UsageError, match="two non-terminal"):
        synthetic_units(_spec(S=2, A=1, terminal=(1,)), pooled=False)
    assert math.isfinite(synthetic_units(_spec(S=2, A=1), pooled=False)[0]["reward"].sum())


@pytest.mark.parametrize("strategy,stationary", [("synthetic", False), ("synthetic-repeat", True)])
def test_synthetic_canary_attains_the_release_sensitivity(strategy, stationary):
    """--canary synthetic(-repeat) on real logs: every released family changes by exactly its declared
    L1 and L2 sensitivity (the real-unit canaries reach e.g. 0.963 of the pooled L2 on ICU-Sepsis)."""
    from privaudit.audit import make_pair, run_audit
    from privaudit.audit.mechanisms.release import ReleaseMechanism
    from tests.audit.helpers import tiny_logs, tiny_spec

    spec, logs = tiny_spec(k=2), tiny_logs()
    pair = make_pair(logs, spec, strategy, rng=np.random.default_rng(0))
    assert pair.description["kind"] == strategy and pair.description["baseline"] == "logs"
    m = ReleaseMechanism(spec, rho=0.5, delta=1e-5, stationary=stationary)
    r = run_audit(m, claim=m.claim(), pair=pair, trials=200, seed=0, progress=False)
    fams = r.data["graybox"]["families"]
    assert {f["name"] for f in fams} >= {"visits", "transitions"}
    for f in fams:
        assert f["l2"] == pytest.approx(f["declared_l2"], rel=1e-12) and f["l1"] == pytest.approx(f["declared_l1"])


def test_resolution_reported_is_that_of_the_deciding_test():
    """A rho-zCDP claim is decided by the generic test: the reported resolution is the generic one
    (not the GDP one, which is larger and would hide that the audit could not refute the claim)."""
    from privaudit.audit import make_pair, run_audit
    from privaudit.audit.mechanisms.release import ReleaseMechanism
    from privaudit.pipeline.report import audit_summary
    from tests.audit.helpers import tiny_logs, tiny_spec

    spec, logs = tiny_spec(k=2), tiny_logs()
    pair = make_pair(logs, spec, "synthetic", rng=np.random.default_rng(0))
    m = ReleaseMechanism(spec, rho=0.5, delta=1e-5, stationary=False)
    r = run_audit(m, claim=m.claim(), pair=pair, trials=200, seed=0, progress=False)
    res = r.data["resolution_limit"]
    assert r.data["method"]["test"] == "generic"
    assert res["epsilon"] < res.get("epsilon_gaussian", math.inf)
    a = audit_summary(r)
    assert a["resolution_epsilon"] == pytest.approx(res["epsilon"])
    assert a["resolution_epsilon"] < a["claim"]["epsilon"] and a["can_refute"] is False
    assert any("could not have refuted" in msg for msg in r.data["messages"])
