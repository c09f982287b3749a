"""``privaudit audit`` end to end: exit codes, report schema, plot, user mechanisms."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.audit import load_report, make_pair
from privaudit.audit.report import AuditReport
from privaudit.cli import main
from privaudit.core.spec import DomainSpec
from tests.audit.helpers import tiny_logs, tiny_spec

USER_MECHANISMS = '''
import numpy as np

def _visits(logs):
    v = np.zeros((3, 5, 2))
    np.add.at(v, (logs["step"].to_numpy(), logs["state"].to_numpy(), logs["action"].to_numpy()), 1)
    return v

def laplace_release(logs, rng, n_runs=1):          # correct: L1 = 2H = 6, eps = 1
    return np.rint(_visits(logs) + rng.laplace(0, 6.0, (n_runs, 3, 5, 2)))

def leaky_release(logs, rng):                       # unbatched, noise 10x too small
    return np.rint(_visits(logs) + rng.laplace(0, 0.6, (3, 5, 2)))

def canary_score(outputs):                          # fixed user attack: count in state 4
    return outputs[:, :, 4, :].sum(axis=(1, 2))
'''


@pytest.fixture
def files(tmp_path):
    spec = tiny_spec()
    logs = tiny_logs()
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    logs.write_parquet(tmp_path / "logs.parquet")
    p = make_pair(logs, spec, "rare", rng=np.random.default_rng(0))
    p.d.write_parquet(tmp_path / "d.parquet")
    p.d_prime.write_parquet(tmp_path / "d2.parquet")
    (tmp_path / "mine.py").write_text(USER_MECHANISMS)
    return tmp_path


def _run(args):
    return CliRunner().invoke(main, ["audit", *map(str, args)])


def test_release_audit_writes_a_valid_report_and_plot(files):
    out, png = files / "rep.json", files / "rep.png"
    res = _run(["--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
                "--claim-rho", "0.5", "--trials", "5000", "--out", out, "--plot", png, "--seed", "1", "--json"])
    assert res.exit_code == 0, res.output
    doc = load_report(out)
    # the generic test is the default for a rho claim; the GDP numbers are shown but not used
    assert doc["verdict"] == "no violation found" and doc["claim"]["kind"] == "generic"
    assert doc["method"]["valid_for_claim"] == ["generic"] and doc["method"]["epsilon_lower_bound_from"] == "generic"
    assert doc["epsilon_lower_bound"] == doc["method"]["generic"]["epsilon_lower_bound"]
    # 5000 trials: 1500 selection runs (30%, below the 2000 floor), 3500 evaluation runs
    assert doc["resolution_limit"]["epsilon"] > 0 and doc["chosen_event"]["counts"]["positives_evaluated"] == 3500
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(res.stdout[res.stdout.index("{"):])["verdict"] == doc["verdict"]


def test_release_run_above_its_claim_exits_3(files):
    res = _run(["--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
                "--claim-rho", "0.5", "--mechanism-rho", "4", "--trials", "10000", "--out", files / "r.json",
                "--seed", "2", "--claim-kind", "gaussian", "--noise", "rounded"])
    assert res.exit_code == 3, res.output
    assert load_report(files / "r.json")["verdict"] == "violation"


def test_user_mechanisms_explicit_pair_and_user_score(files):
    common = ["--pair", files / "d.parquet", files / "d2.parquet", "--spec", files / "spec.json",
              "--claim-epsilon", "1", "--delta", "0", "--seed", "3"]
    ok = _run(["--mechanism", f"{files / 'mine.py'}:laplace_release", *common, "--trials", "10000",
               "--score", f"{files / 'mine.py'}:canary_score", "--out", files / "ok.json"])
    assert ok.exit_code == 0, ok.output
    doc = load_report(files / "ok.json")
    assert "user:canary_score" in doc["candidates"] and doc["neighbouring_pair"]["kind"] == "explicit"
    # files the auditor cannot tell are public: not shareable, said in the command's words
    assert doc["shareable"] is False and "not shareable: the pair was read from files (an explicit `--pair` D D2)" \
        in ok.output
    assert doc["method"]["valid_for_claim"] == ["generic"] and doc["method"]["batched"]
    bad = _run(["--mechanism", f"{files / 'mine.py'}:leaky_release", *common, "--trials", "400",
                "--jobs", "1", "--out", files / "bad.json"])
    assert bad.exit_code == 3, bad.output
    assert not load_report(files / "bad.json")["method"]["batched"]


@pytest.mark.parametrize("extra, match", [
    (["--claim-rho", "1", "--claim-epsilon", "1", "--delta", "1e-5"], "exactly one claim"),
    (["--claim-rho", "1", "--delta", "0"], "delta"),  # a rho claim needs a delta in (0, 1)
    (["--claim-rho", "-1"], "claim-rho"),
    (["--claim-rho", "1", "--mechanism", "dp-vapvi"], "features"),
    (["--claim-rho", "1", "--mechanism", "nofile.py:f"], "no such file"),
])
def test_usage_errors_exit_2_and_write_nothing(files, extra, match):
    args = ["--logs", files / "logs.parquet", "--spec", files / "spec.json", "--trials", "100",
            "--out", files / "never.json"]
    if "--mechanism" not in extra:
        args += ["--mechanism", "release"]
    res = _run(args + extra)
    assert res.exit_code == 2, res.output
    assert match in res.output and "Traceback" not in res.output
    assert not (files / "never.json").exists()


def test_pair_that_is_not_neighbours_is_refused(files):
    res = _run(["--mechanism", "release", "--pair", files / "d.parquet", files / "logs.parquet", "--spec",
                files / "spec.json", "--claim-rho", "1", "--trials", "100", "--out", files / "x.json"])
    # d.parquet = logs, so this pair is identical: allowed (a null audit), and gives 0
    assert res.exit_code == 0, res.output
    assert load_report(files / "x.json")["epsilon_lower_bound"] == 0.0
    tiny_logs().head(30).write_parquet(files / "short.parquet")
    res = _run(["--mechanism", "release", "--pair", files / "d.parquet", files / "short.parquet", "--spec",
                files / "spec.json", "--claim-rho", "1", "--trials", "100", "--out", files / "y.json"])
    assert res.exit_code == 2 and "exactly one privacy unit" in res.output


# --------------------------------------------------------------------------- input validation

@pytest.mark.parametrize("breakage, rule", [
    ("duplicate_step", "step_duplicate"),   # a repeated (episode_id, step) row: not the mechanism's fault
    ("nan_reward", "not_finite"),
])
def test_invalid_logs_exit_1_with_located_errors_before_anything_runs(files, breakage, rule):
    logs = tiny_logs()
    if breakage == "duplicate_step":
        bad = pl.concat([logs, logs.head(1)])
    else:
        bad = logs.with_columns(reward=pl.when(pl.int_range(pl.len()) == 5).then(float("nan"))
                                .otherwise(pl.col("reward")))
    bad.write_parquet(files / "bad.parquet")
    common = ["--mechanism", "release", "--spec", files / "spec.json", "--claim-rho", "1", "--trials", "100",
              "--out", files / "never.json"]
    for inp in (["--logs", files / "bad.parquet"], ["--pair", files / "d.parquet", files / "bad.parquet"]):
        res = _run([*common, *inp])
        assert res.exit_code == 1, res.output
        assert f"[{rule}] row " in res.output and "refused before anything was computed" in res.output
        assert "epsilon lower bound" not in res.output and "Traceback" not in res.output  # no audit ran
        assert not (files / "never.json").exists()


def test_missing_logs_exit_2_like_every_other_command(files):
    for inp in (["--logs", files / "nope.parquet"], ["--pair", files / "d.parquet", files / "nope.parquet"]):
        res = _run(["--mechanism", "release", *inp, "--spec", files / "spec.json", "--claim-rho", "1",
                    "--trials", "100", "--out", files / "never.json"])
        assert res.exit_code == 2, res.output  # a path that does not exist: usage (MissingInputError)
        assert "nope.parquet" in res.output and not (files / "never.json").exists()


# --------------------------------------------------------------------------- user code

BROKEN = '''
import numpy as np

def raises(logs, rng):
    raise RuntimeError("boom in user code")

def one_arg(logs):
    return np.zeros(3)

def strings(logs, rng):
    return ["a", "b"]

def nothing(logs, rng):
    return None

def wrong_batch(logs, rng, n_runs=1):
    return np.zeros((n_runs + 1, 3))

def ok(logs, rng):
    return rng.normal(size=3)

def score_raises(outputs):
    raise KeyError("no such cell")

def score_two_args(outputs, extra):
    return outputs.sum(axis=1)
'''


@pytest.mark.parametrize("mech, score, expected", [
    ("raises", None, ["raised RuntimeError: boom in user code", "fn(logs"]),
    ("one_arg", None, ["wrong signature one_arg(logs)", "fn(logs"]),
    ("strings", None, ["must return real numbers", "<U1"]),
    ("nothing", None, ["returned None"]),
    ("wrong_batch", None, ["n_runs=30 runs on axis 0", "(31, 3)"]),  # 30 selection runs of 100
    ("ok", "score_raises", ["score_raises raised KeyError", "fn(outputs"]),
    ("ok", "score_two_args", ["wrong signature score_two_args(outputs, extra)"]),
    ("syntax", None, ["cannot import", "SyntaxError"]),
])
def test_user_code_errors_are_named_without_traceback(files, mech, score, expected):
    (files / "broken.py").write_text(BROKEN)
    (files / "syntax.py").write_text("def f(:\n")
    ref = f"{files / 'syntax.py'}:f" if mech == "syntax" else f"{files / 'broken.py'}:{mech}"
    args = ["--mechanism", ref, "--logs", files / "logs.parquet", "--spec", files / "spec.json",
            "--claim-rho", "1", "--trials", "100", "--jobs", "1", "--seed", "0", "--out", files / "never.json"]
    if score:
        ref = f"{files / 'broken.py'}:{score}"
        args += ["--score", ref]
    res = _run(args)
    assert res.exit_code == 2, res.output
    assert f"error: {ref}" in res.output, res.output
    for text in expected:
        assert text in res.output, res.output
    assert "Traceback" not in res.output and not (files / "never.json").exists()
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit)


def test_errors_inside_privaudit_are_not_masked_as_user_errors():
    """Only FILE.py:NAME calls are the user-code boundary: an exception from an
    in-process callable (the library's own code) keeps its type and traceback."""
    from privaudit.audit import Claim, run_audit
    from privaudit.core.errors import UserCodeError

    def library_mechanism(logs, rng):
        raise ZeroDivisionError("a bug in privaudit")

    with pytest.raises(ZeroDivisionError):
        run_audit(library_mechanism, tiny_logs(), tiny_spec(), claim=Claim.from_rho(1, 1e-6), trials=100, seed=0)
    assert not issubclass(ZeroDivisionError, UserCodeError)


# --------------------------------------------------------------------------- consistency

def test_existing_out_or_plot_is_refused_unless_overwrite(files):
    args = ["--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
            "--claim-rho", "1", "--trials", "100", "--out", files / "rep.json", "--plot", files / "rep.png"]
    for existing in ("rep.json", "rep.png"):
        (files / "rep.json").unlink(missing_ok=True)
        (files / "rep.png").unlink(missing_ok=True)
        (files / existing).write_text("keep me")
        res = _run(args)
        assert res.exit_code == 2 and "--overwrite" in res.output and "canary" not in res.output, res.output
        assert (files / existing).read_text() == "keep me"
        other = ({"rep.json", "rep.png"} - {existing}).pop()
        assert not (files / other).exists()   # nothing ran
    res = _run(args + ["--overwrite"])  # issue 29 item 3: "keep me" is no earlier plot: never replaced
    assert res.exit_code == 2 and "replaces only an earlier audit plot" in res.output, res.output
    assert (files / "rep.png").read_text() == "keep me"
    (files / "rep.png").unlink()
    assert _run(args).exit_code == 0
    res = _run(args + ["--overwrite"])  # an earlier report and plot are replaced
    assert res.exit_code == 0, res.output
    assert load_report(files / "rep.json")["rng_mode"] == "secure"
    assert (files / "rep.png").read_bytes()[:4] == b"\x89PNG"


def test_one_path_for_out_and_plot_is_refused_before_any_run(files):
    """Before: `--out rep.json --plot rep.json` ran, wrote the report, then the PNG over it, exit 0 (fresh-user
    pass)."""
    res = _run(["--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
                "--claim-rho", "1", "--trials", "100", "--out", files / "rep.json", "--plot", files / "." / "rep.json"])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == f"error: `--out` and `--plot` must be different files (both are {files / 'rep.json'})."
    assert not (files / "rep.json").exists()


def test_a_plot_that_fails_leaves_no_report(files, monkeypatch):
    """The report and its figure are written together: before, a figure that failed (disk full) left the
    report behind (fresh-user pass)."""
    from privaudit.audit.report import AuditReport

    def full(self, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(AuditReport, "plot", full)
    res = _run(["--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
                "--claim-rho", "1", "--trials", "100", "--out", files / "rep.json", "--plot", files / "rep.png"])
    assert res.exit_code == 2 and "No space left on device" in res.output, res.output
    assert not (files / "rep.json").exists() and not (files / "rep.png").exists()
    assert not [p for p in files.iterdir() if p.name.endswith(".tmp")]


def test_rho_claim_defaults_to_delta_1e6_and_seeded_rng_mode(files):
    res = _run(["--mechanism", "release", "--logs", files / "logs.parquet", "--spec", files / "spec.json",
                "--claim-rho", "1", "--trials", "100", "--seed", "0", "--per-step", "--out", files / "r.json"])
    assert res.exit_code == 0, res.output
    doc = load_report(files / "r.json")
    # rho 1 at delta 1e-6: eps = 7.766 (Canonne-Kamath-Steinke), the figure release and pipeline print
    assert doc["delta"] == 1e-6 and doc["claimed_epsilon"] == pytest.approx(7.766, abs=5e-4)
    assert doc["rng_mode"] == "seeded-insecure"
    assert "canary: synthetic (default: units built from the spec" in res.output
    assert doc["neighbouring_pair"]["kind"] == "synthetic"


# --------------------------------------------------------------------------- pooled releases

def _pooled_files(tmp_path):
    """H = 20 steps over S = 60 states: a unit's 20 rows fall in (almost) distinct pooled
    cells, so the rare canary changes the pooled counts by L2 ~ sqrt(2H) = 6.3 of the
    declared kH sqrt(2) = 28.3, i.e. it sees only ~1/H of the pooled rho."""
    Hp, Sp, Ap, n = 20, 60, 2, 40
    spec = DomainSpec.from_dict({
        "format_version": 1, "dataset_id": "audit-pooled", "horizon": Hp, "n_states": Sp, "n_actions": Ap,
        "terminal_states": [], "reward_range": [0.0, 1.0], "privacy_unit": {"column": "unit_id", "max_episodes": 1}})
    rng = np.random.default_rng(0)
    st, ac = rng.integers(0, Sp - 1, (n, Hp)), rng.integers(0, Ap, (n, Hp))
    nx = np.concatenate([st[:, 1:], rng.integers(0, Sp - 1, (n, 1))], axis=1)
    pl.DataFrame({
        "episode_id": np.repeat(np.arange(n), Hp), "step": np.tile(np.arange(Hp), n).astype(np.int32),
        "state": st.ravel().astype(np.int32), "action": ac.ravel().astype(np.int32),
        "reward": np.round(rng.uniform(0, 1, n * Hp), 3), "next_state": nx.ravel().astype(np.int32),
        "unit_id": np.repeat(np.arange(n), Hp)}).write_parquet(tmp_path / "pooled.parquet")
    (tmp_path / "pspec.json").write_text(json.dumps(spec.to_dict()))
    return ["--logs", tmp_path / "pooled.parquet", "--spec", tmp_path / "pspec.json"]


def test_pooled_release_above_its_claim_is_flagged_with_the_default_canary(tmp_path):
    """A --stationary release run at rho 20 against a claim of rho 1. The default canary is
    `synthetic-repeat` (u*, v*: one cell each at every h, built from the spec: pooled L2 =
    kH sqrt(2) = 28.3, the declared sensitivity, true rho 20, mu ~ 6.3 vs claimed 1.41), and
    `repeat` (one real unit replaced: L2 ~ sqrt(H^2 + H) ~ 20.5 of 28.3, mu ~ 4.6) is still
    selectable: both flagged. With `rare` the pair's true rho is ~ 20 x 40 / 800 = 1,
    at the claim, so a valid audit flags it with probability <= 1 - confidence = 5%: this
    fixed seed is not flagged, which is why the default matters."""
    common = ["--mechanism", "release", "--stationary", *_pooled_files(tmp_path), "--claim-rho", "1",
              "--mechanism-rho", "20", "--trials", "2000", "--seed", "5", "--claim-kind", "gaussian",
              "--noise", "rounded"]
    res = _run([*common, "--out", tmp_path / "default.json"])
    assert res.exit_code == 3, res.output
    assert "canary: synthetic-repeat (default: units built from the spec that attain the declared pooled" in res.output
    doc = load_report(tmp_path / "default.json")
    assert doc["neighbouring_pair"]["kind"] == "synthetic-repeat" and doc["epsilon_lower_bound"] > 7.766
    rep = _run([*common, "--canary", "repeat", "--out", tmp_path / "repeat.json"])
    assert rep.exit_code == 3 and "canary: repeat (--canary)" in rep.output, rep.output
    assert load_report(tmp_path / "repeat.json")["neighbouring_pair"]["kind"] == "canary-repeat"
    rare = _run([*common, "--canary", "rare", "--out", tmp_path / "rare.json"])
    assert rare.exit_code == 0 and "canary: rare (--canary)" in rare.output, rare.output
    # a pair built from the logs, or synthetic units added to them (the CLI's default), is not shareable:
    # the report says so (`shareable`) and so does stderr
    assert "not shareable: the pair replaces a real unit of the logs (canary-rare)" in rare.output
    assert "not shareable: the pair replaces a real unit of the logs (canary-repeat)" in rep.output
    assert "not shareable: D and D' are the private logs plus synthetic units" in res.output
    assert [load_report(tmp_path / f"{n}.json")["shareable"] for n in ("default", "repeat", "rare")] == [False] * 3


HOOKED = '''
import numpy as np

def _in_state_4(logs):                              # the rare canary's cells: 0 rows in D, 3 in D'
    return float((logs["state"] == 4).sum())

class Hooked:                                       # a mechanism object with gray-box hooks
    def __call__(self, logs, rng):
        return np.array([_in_state_4(logs) + rng.laplace(0, 10.0)])

    def exact_statistics(self, logs):
        return {"rows": np.array([_in_state_4(logs)])}

    def declared_sensitivity(self):
        return {"rows": {"l1": 0.0, "l2": 0.0}}     # false on purpose: a gray-box check would catch it

hooked = Hooked()

class NaiveLaplace:                                 # a count + numpy's float Laplace (Mironov 2012's target)
    def __call__(self, logs, rng, n_runs=1):
        return _in_state_4(logs) + 5.0 + rng.laplace(0.0, 1.0, (n_runs, 1))

    def exact_statistics(self, logs):
        return {"count": np.array([_in_state_4(logs) + 5.0])}

    def declared_sensitivity(self):
        return {"count": {"l1": 3.0, "l2": 3.0}}    # true: a unit has at most H = 3 rows

    def noise(self):
        return {"count": {"mechanism": "laplace", "scale": 1.0}}

naive = NaiveLaplace()
'''


def test_a_users_gray_box_hooks_are_honoured_from_the_cli(files):
    """Issue 30 item 3: FILE.py:NAME's hooks are used as from Python (on main they were only named in a
    warning): the declared sensitivity 0 is refuted by the gray-box check before any noisy run."""
    (files / "hooked.py").write_text(HOOKED)
    res = _run(["--mechanism", f"{files / 'hooked.py'}:hooked", "--logs", files / "logs.parquet", "--spec",
                files / "spec.json", "--claim-epsilon", "1", "--delta", "0", "--trials", "100", "--jobs", "1",
                "--seed", "0", "--out", files / "hooked.json"])
    assert res.exit_code == 3, res.output
    assert "hooked: using its hook(s) exact_statistics, declared_sensitivity; the gray-box sensitivity check runs" \
        in res.stderr
    doc = load_report(files / "hooked.json")
    assert doc["method"]["test"] == "gray-box" and doc["graybox"]["violation"] and doc["trials"] == 0
    plain = _run(["--mechanism", f"{files / 'mine.py'}:laplace_release", "--logs", files / "logs.parquet", "--spec",
                  files / "spec.json", "--claim-epsilon", "1", "--delta", "0", "--trials", "100", "--seed", "0",
                  "--out", files / "plain.json"])
    assert plain.exit_code in (0, 3), plain.output
    assert "using its hook(s)" not in plain.stderr  # a plain function has no hooks


def test_float_attack_uses_the_hooks_from_the_cli_as_from_python(files):
    """Issue 30 item 3: counts 5 vs 8 plus numpy's float Laplace(1) against a claim of epsilon 3 (the
    declared sensitivity 3 is right: the leak is the float lattice alone). The sampler-free lattice score
    cannot place counts that are not near 0, so without the hooks the CLI certified 2.77 (no violation) at
    this seed; with the exact_statistics and noise hooks the numpy-Laplace lattice score reaches 7.82, as
    run_audit does on the object from Python."""
    (files / "hooked.py").write_text(HOOKED)
    res = _run(["--mechanism", f"{files / 'hooked.py'}:naive", "--pair", files / "d.parquet", files / "d2.parquet",
                "--spec", files / "spec.json", "--claim-epsilon", "3", "--trials", "20000", "--seed", "0",
                "--out", files / "naive.json"])
    assert res.exit_code == 3, res.output
    doc = load_report(files / "naive.json")
    assert doc["epsilon_lower_bound"] > 6 and doc["chosen_event"]["candidate"] == "numpy_laplace_lattice"
    assert not doc["graybox"]["violation"] and doc["float_sampler"]["sampler"] == "numpy_laplace"
    assert ("decided by: outputs more of whose cells (value) numpy's Laplace sampler can produce from D's "
            "noise-free value than from D''s") in res.stderr  # the event in words (item 5)
