"""``privaudit train --algo dp-vapvi --ledger``: checked before any noise, charged on success, refusal exits 3."""

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.learners.linear import privacy as lp
from privaudit.mdp.simulate import simulate, write_logs
from privaudit.mdp.synthetic_linear import behaviour_policy, synthetic_linear_mdp, synthetic_linear_spec_doc
from privaudit.privacy.ledger import init_ledger, ledger_status
from privaudit.core.spec import load_spec, write_spec


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ledger")
    write_logs(simulate(synthetic_linear_mdp(0), behaviour_policy(), 50, np.random.default_rng(2)),
               d / "logs.parquet")
    write_spec(synthetic_linear_spec_doc(), d / "spec.json")
    return d


def _train(files, out, ledger, rho):
    return CliRunner().invoke(main, [str(x) for x in (
        "train", files / "logs.parquet", "--spec", files / "spec.json", "--algo", "dp-vapvi", "--rho", rho,
        "--ledger", ledger, "--out", out, "--seed", 1)])


def test_dpvapvi_charges_then_refuses_with_exit_3(files, tmp_path, monkeypatch):
    spec = load_spec(files / "spec.json")
    ledger = tmp_path / "budget.jsonl"
    init_ledger(ledger, spec.dataset_id, "1.5")
    r = _train(files, tmp_path / "p1", ledger, 1.0)
    assert r.exit_code == 0, r.output
    st = ledger_status(ledger)
    assert st["n_entries"] == 1 and st["rho_spent"] == "1" and "dp-vapvi" in st["entries"][0]["description"]
    assert (tmp_path / "p1" / "policy.json").exists()

    # second run would exceed 1.5: refused before any noise is drawn, nothing written or charged
    drawn = []
    real = lp.draw_step_noise
    monkeypatch.setattr(lp, "draw_step_noise", lambda *a, **k: drawn.append(1) or real(*a, **k))
    r = _train(files, tmp_path / "p2", ledger, 1.0)
    assert r.exit_code == 3, r.output
    assert "exceed the budget" in r.output and "Traceback" not in r.output
    assert drawn == [] and not (tmp_path / "p2").exists()
    assert ledger_status(ledger)["n_entries"] == 1

    # what still fits is accepted and charged exactly
    r = _train(files, tmp_path / "p3", ledger, 0.5)
    assert r.exit_code == 0, r.output
    assert len(drawn) == 20  # H = 20 steps, one draw each
    assert ledger_status(ledger)["rho_spent"] == "1.5"


def test_ledger_refused_for_non_private_learner(files, tmp_path):
    spec = load_spec(files / "spec.json")
    ledger = tmp_path / "b.jsonl"
    init_ledger(ledger, spec.dataset_id, 1)
    r = CliRunner().invoke(main, [str(x) for x in ("train", files / "logs.parquet", "--spec", files / "spec.json",
                                                   "--algo", "vapvi", "--ledger", ledger, "--out", tmp_path / "p")])
    assert r.exit_code == 2 and "not private" in r.output
    assert ledger_status(ledger)["n_entries"] == 0 and not (tmp_path / "p").exists()
