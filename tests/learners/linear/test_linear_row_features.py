"""Per-row `features` column (column-x-action): equivalence with the finite path, truncation, CLI end to end."""

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import SpecError, ValidationFailed
from privaudit.learners.linear import train_from_logs
from privaudit.learners.policy import load_policy
from privaudit.mdp.random_tabular import random_tabular_mdp, random_tabular_spec_doc
from privaudit.mdp.simulate import simulate, uniform_policy, write_logs
from privaudit.core.spec import DomainSpec, load_spec, write_spec

MDP = random_tabular_mdp(4, 2, 3, 0)
S, A, H = 4, 2, 3


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("rows")
    df = simulate(MDP, uniform_policy(MDP), 400, np.random.default_rng(3))
    X = np.eye(S)  # public state features: x(s) = e_s, so phi = e_s ⊗ e_a is one-hot up to a permutation
    write_logs(df.with_columns(pl.Series("features", X[df["state"].to_numpy()].tolist())), d / "logs.parquet")
    np.save(d / "x.npy", X)
    doc = random_tabular_spec_doc(MDP)
    doc["features"] = {"map": "one-hot"}
    write_spec(doc, d / "onehot.json")
    doc["features"] = {"map": "column-x-action", "dim": S * A, "norm": "clip", "state_table": "x.npy"}
    write_spec(doc, d / "rows.json")
    del doc["features"]["state_table"]
    write_spec(doc, d / "rows_notable.json")
    return d


def test_vapvi_rows_equal_finite_one_hot(files):
    ref = train_from_logs(files / "logs.parquet", load_spec(files / "onehot.json"), "vapvi")
    pol = train_from_logs(files / "logs.parquet", load_spec(files / "rows.json"), "vapvi")
    # finite path: index s*A + a; row path: index a*S + s
    perm = (np.arange(A)[:, None] * S + np.arange(S)[None, :]).T.reshape(-1)  # finite index -> row index
    np.testing.assert_allclose(pol.extras["w"][:, perm], ref.extras["w"], atol=1e-9)
    np.testing.assert_array_equal(pol.table, ref.table)
    assert pol.parameters["features"]["map"] == "column-x-action" and pol.parameters["features"]["norm"] == "clip"


def test_truncated_episode_gets_v_zero(files, tmp_path):
    """Dropping step 2 rows of an episode makes its step-1 row's next value 0 (pessimistic), not an error."""
    df = pl.read_parquet(files / "logs.parquet")
    cut = df.filter(~((pl.col("episode_id") == 0) & (pl.col("step") == H - 1)))
    cut = cut.with_columns(pl.when((pl.col("episode_id") == 0) & (pl.col("step") == H - 2)).then(True)
                           .otherwise(pl.col("truncated")).alias("truncated"))
    write_logs(cut, tmp_path / "cut.parquet")
    from privaudit.learners.linear.rows import row_steps
    steps = row_steps(cut.select("episode_id", "step", "state", "action", "reward", "next_state", "features"),
                      load_spec(files / "rows.json"), S)
    full = row_steps(df.select("episode_id", "step", "state", "action", "reward", "next_state", "features"),
                     load_spec(files / "rows.json"), S)
    assert (steps[1].nxt == -2).sum() == (full[1].nxt == -2).sum() + 1  # -2: unknown next state, V = 0
    assert (steps[1].nxt == -1).sum() == (full[1].nxt == -1).sum()  # -1: terminal next state
    assert np.all(steps[H - 1].nxt == -1)


def test_dp_vapvi_cli_end_to_end_and_placeholder_table(files, tmp_path):
    run = lambda *a: CliRunner().invoke(main, [str(x) for x in a])  # noqa: E731
    r = run("train", files / "logs.parquet", "--spec", files / "rows.json", "--algo", "dp-vapvi", "--rho", 2,
            "--seed", 1, "--out", tmp_path / "pol")
    assert r.exit_code == 0, r.output
    pol = load_policy(tmp_path / "pol")
    assert pol.extras["w"].shape == (H, S * A) and pol.extras["Lambda_inv"].shape == (H, S * A, S * A)
    assert not pol.privacy.private and pol.privacy.guarantee is not None  # seeded: not private
    assert pol.parameters["table"] == "state_table"
    assert "greedy" in pol.parameters["table_note"]
    assert set(np.unique(pol.table)) <= {0.0, 1.0}
    r = run("train", files / "logs.parquet", "--spec", files / "rows_notable.json", "--algo", "dp-vapvi",
            "--rho", 2, "--seed", 1, "--out", tmp_path / "pol2")
    assert r.exit_code == 0, r.output
    pol2 = load_policy(tmp_path / "pol2")
    assert "placeholder" in pol2.parameters["table"] and np.allclose(pol2.table, 1 / A)
    np.testing.assert_allclose(pol2.extras["w"], pol.extras["w"])  # same seed, same statistics
    doc = json.loads((tmp_path / "pol" / "policy.json").read_text())
    assert "seed" not in json.dumps(doc["parameters"])


def test_spec_errors(files):
    doc = json.loads((files / "rows.json").read_text())
    doc["features"]["norm"] = "rescale"
    with pytest.raises(SpecError, match="clip"):
        train_from_logs(files / "logs.parquet", DomainSpec.from_dict(doc), "vapvi")
    doc["features"].update(norm="clip", dim=2 * S * A)  # m = 2S != the lists' length S
    doc["features"].pop("state_table")
    with pytest.raises(ValidationFailed, match="features_length"):  # a fatal validation rule since session 11
        train_from_logs(files / "logs.parquet", DomainSpec.from_dict(doc), "vapvi")


def test_clipped_feature_vectors_are_counted_and_said(files, tmp_path):
    """Per-row clipping to norm 1 changes the data like bounding's repairs: its count and share are said on
    stderr and written to the private local log (issue 29 item 2: any clipped field)."""
    df = pl.read_parquet(files / "logs.parquet")
    big = (df["state"] == 0).to_numpy()
    X = np.eye(S)[df["state"].to_numpy()] * np.where(big, 2.0, 1.0)[:, None]  # norm 2 in state 0, else 1
    write_logs(df.with_columns(pl.Series("features", X.tolist())), tmp_path / "logs.parquet")
    (tmp_path / "x.npy").write_bytes((files / "x.npy").read_bytes())
    (tmp_path / "rows.json").write_text((files / "rows.json").read_text())
    r = CliRunner().invoke(main, [str(x) for x in ("train", tmp_path / "logs.parquet", "--spec", tmp_path / "rows.json",
                                                   "--algo", "vapvi", "--out", tmp_path / "pol")])
    assert r.exit_code == 0, r.output
    n, rows = int(big.sum()), df.height
    assert 0 < n < rows
    assert f"feature vectors clipped to norm 1 (column-x-action): {n} of {rows} rows" in r.stderr
    log = json.loads((tmp_path / "pol.local-log.json").read_text())
    assert log["features_clipped"] == {"count": n, "of": rows, "share": n / rows}
