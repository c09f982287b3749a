"""privaudit release: noise scale, manifest, dense domain, ledger, bad input, read-back."""

import json
import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from scipy import stats

from privaudit.cli import main
from privaudit.core.envelope import ENVELOPE_KEYS
from privaudit.core.errors import ArtifactError, BudgetExceededError, SpecError, UsageError
from privaudit.privacy import ledger as ledger_mod
from privaudit.core.schemas import schema_errors
from privaudit.core.spec import load_spec
from privaudit.release import mechanism as mechanism_mod
from privaudit.release import size as release_size
from privaudit.release.tabular import ReleaseOptions, load_release, release_logs
from privaudit.privacy import mechanisms
from tests._release_logs import random_log, slow_counts, write_spec
from tests._spy import spy_everywhere, watch_reads

H, S, A = 5, 30, 5
TERMINALS = (29,)
SEED = 987654321987
#: The logs' reward is r(s') of this table (varied values in [0, 1], so the reward sums of the private spec
#: still test rounding); the public spec declares it in full, as it must (validation rule reward_not_public).
R_NEXT = np.round(np.random.default_rng(6).uniform(0.0, 1.0, S), 4)
PUBLIC = {s: float(v) for s, v in enumerate(R_NEXT)}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A valid log (both with private and public rewards specs) and its exact statistics."""
    d = tmp_path_factory.mktemp("rel")
    rng = np.random.default_rng(5)
    df = random_log(rng, 173, H=H, S=S, A=A, terminals=TERMINALS, avoid_states=(7, 8))
    df = df.with_columns(pl.Series("reward", R_NEXT[df["next_state"].to_numpy()]))
    logs = d / "logs.parquet"
    df.write_parquet(logs)
    (d / "logs_dir").mkdir()  # the same logs as a folder of parts: every read lists it (tests._spy.watch_reads)
    df.write_parquet(d / "logs_dir" / "part-0.parquet")
    n, t, _ = slow_counts(df, H, S, A, TERMINALS)
    rq = np.zeros((H, S, A), dtype=np.int64)
    for row in df.iter_rows(named=True):
        rq[row["step"], row["state"], row["action"]] += int(round(row["reward"] * mechanism_mod.REWARD_QUANTUM))
    return {"dir": d, "df": df, "logs": logs, "logs_dir": d / "logs_dir", "n": n, "t": t, "rq": rq,
            "spec_private": write_spec(d, "private.json", H=H, S=S, A=A, terminals=TERMINALS),
            "spec_public": write_spec(d, "public.json", H=H, S=S, A=A, terminals=TERMINALS,
                                      public_reward=PUBLIC)}


def _all_transitions(rel):
    return np.stack([rel.transitions_at(h) for h in range(rel.H)])


# ----------------------------------------------------------------------------- noise scale
def _var_rounded_or_exact(mech, scale, noise):
    """Variance and 4th moment of one cell's integer noise (analytic, see comments)."""
    if mech == "gaussian":
        # rounded: Var(round(Z)) = sigma^2 + 1/12 (Sheppard; error ~exp(-2 pi^2 sigma^2) ~ 0 at sigma > 2);
        # exact: the discrete Gaussian N_Z(0, sigma^2) has variance sigma^2 up to the same negligible term.
        v = scale ** 2 + (1 / 12 if noise == "rounded" else 0.0)
        return v, 3 * v ** 2
    if noise == "rounded":  # Var(round(L_b)) = 2b^2 + 1/12 up to O(exp(-2 pi b)) terms; E L^4 = 24 b^4
        return 2 * scale ** 2 + 1 / 12, 24 * scale ** 4
    # discrete Laplace P(y) ~ exp(-|y|/b): with p = exp(-1/b), Var = 2p/(1-p)^2,
    # E Y^4 = 2 p (1 + 11p + 11p^2 + p^3) / (1-p)^4 (moments of the two-sided geometric)
    p = math.exp(-1 / scale)
    return 2 * p / (1 - p) ** 2, 2 * p * (1 + 11 * p + 11 * p * p + p ** 3) / (1 - p) ** 4


@pytest.mark.parametrize("mech,noise,budget", [
    ("gaussian", "exact", {"rho": 0.5}),
    ("laplace", "exact", {"epsilon": 2.0}),
])
def test_noise_variance_matches_manifest_scale(data, tmp_path, mech, noise, budget):
    """sum over all cells of (release - exact)^2 / v_f lies in its sampling interval.

    Gaussian: each standardized square is ~chi^2_1, so T ~ chi^2_N (N = 24000 cells);
    the interval is the central 1 - 1e-6 chi-square interval (false-failure probability 1e-6).
    Laplace: T is a sum of N iid terms with mean 1 and variance m4/v^2 - 1; normal
    approximation (N = 24000) at z = 5.0 two-sided (false failure ~6e-7 plus the CLT error).
    The same statistic with the scale inflated by 15% must fall outside the interval
    (the test has power against a wrong sigma/b).
    """
    out = tmp_path / "rel"
    release_logs(data["logs"], data["spec_private"], mechanism=mech, out=out, seed=3,
                 options=ReleaseOptions(noise=noise), **budget)
    rel = load_release(out)
    fams = rel.manifest.to_dict()["families"]
    diffs = {"visits": rel.visits - data["n"], "transitions": _all_transitions(rel) - data["t"],
             "rewards": rel.rewards - data["rq"]}
    T = {1.0: 0.0, 1.15: 0.0}
    N = 0
    for f, d in diffs.items():
        for infl in T:
            v, _ = _var_rounded_or_exact(mech, fams[f]["noise_scale"] * infl, noise)
            T[infl] += float(np.sum(d.astype(np.float64) ** 2)) / v
        N += d.size
        mean_ok = abs(d.mean()) < 5.0 * math.sqrt(_var_rounded_or_exact(mech, fams[f]["noise_scale"], noise)[0] / d.size)
        assert mean_ok, f
    if mech == "gaussian":
        lo, hi = stats.chi2.ppf([0.5e-6, 1 - 0.5e-6], N)
    else:
        v, m4 = _var_rounded_or_exact(mech, fams["visits"]["noise_scale"], noise)
        half = 5.0 * math.sqrt(N * (m4 / v ** 2 - 1))
        lo, hi = N - half, N + half
    assert lo < T[1.0] < hi
    assert not lo < T[1.15] < hi


def test_default_noise_is_exact_and_rounded_is_refused(data, tmp_path):
    """Issue 10 item 3: numpy's float samplers (rounded mode) cannot back the stated guarantee."""
    info = release_logs(data["logs"], data["spec_private"], rho=0.5, out=tmp_path / "r", seed=1)
    assert info.manifest.to_dict()["noise"] == "exact"
    with pytest.raises(UsageError, match="rounded"):
        release_logs(data["logs"], data["spec_private"], rho=0.5, out=tmp_path / "r2", seed=1,
                     options=ReleaseOptions(noise="rounded"))
    assert not (tmp_path / "r2").exists()


@pytest.mark.parametrize("mech,budget", [("gaussian", {"rho": 0.5}), ("gaussian", {"epsilon": 1.0, "delta": 1e-7}),
                                         ("laplace", {"epsilon": 2.0})])
def test_manifest_delta_is_what_the_sampler_analysis_gives(data, tmp_path, mech, budget):
    """The stated (epsilon, delta) is the ideal mechanism's plus the sampler's extra delta,
    (1 + e^eps) * (changed cells) * (total variation per draw) (hybrid argument,
    docs/privacy.md), which is 0 for the exact samplers: delta is the requested one
    (Gaussian; the CKS conversion of rho) or 0 (Laplace)."""
    from privaudit.privacy import accounting, samplers

    info = release_logs(data["logs"], data["spec_private"], mechanism=mech, out=tmp_path / "r", seed=1, **budget)
    g = info.manifest.to_dict()["guarantee"]
    fams = info.manifest.to_dict()["families"]
    tv = max(samplers.sampler_total_variation(mech, f["noise_scale"]) for f in fams.values())
    changed = 2 * load_spec(data["spec_private"]).max_episodes_per_unit * H * len(fams)  # cells one unit can change
    extra = (1 + math.exp(g["epsilon"])) * changed * tv
    assert g["sampler"] == samplers.noise_statement("exact")
    assert g["sampler"]["total_variation_per_draw"] == tv == 0.0 and g["sampler"]["extra_delta"] == extra == 0.0
    if mech == "laplace":
        assert g["definition"] == "pure-DP" and g["delta"] == 0.0 and g["epsilon"] == budget["epsilon"]
    else:
        d = budget.get("delta", 1e-6)
        assert g["definition"] == "zCDP" and g["delta"] == d
        assert g["epsilon"] == float(accounting.zcdp_to_dp(g["rho"], d))


def test_rounded_manifest_states_no_certified_guarantee(data):
    """The auditor may still simulate rounded noise; its manifest must not claim a certified sampler."""
    from privaudit.privacy.budget import resolve_budget
    from privaudit.release.mechanism import TabularRelease

    spec = load_spec(data["spec_private"])
    m = TabularRelease.plan(spec, resolve_budget(rho=0.5), noise="rounded").manifest(seeded=True).to_dict()
    assert m["guarantee"]["sampler"]["total_variation_per_draw"] is None
    assert m["guarantee"]["sampler"]["extra_delta"] is None


# ----------------------------------------------------------------------------- paper values
@pytest.mark.parametrize("k", [1, 2])
def test_gaussian_sigma_is_seed_paper_eq1(data, tmp_path, k):
    """Visits + transitions, public reward: sigma^2 = 2H/rho (Qiao & Wang 2023, eq. (1)) times k^2."""
    spec = write_spec(tmp_path, H=H, S=S, A=A, terminals=TERMINALS, public_reward=PUBLIC, k=k)
    info = release_logs(data["logs"], spec, rho=0.7, out=tmp_path / "r", seed=1)
    fams = info.manifest.to_dict()["families"]
    assert set(fams) == {"visits", "transitions"} and not (tmp_path / "r" / "rewards.parquet").exists()
    for f in fams.values():
        assert f["noise_scale"] ** 2 == pytest.approx(k * k * 2 * H / 0.7, rel=1e-12)
        assert f["budget"]["rho"] == pytest.approx(0.35, rel=1e-12)
    assert info.manifest.to_dict()["guarantee"]["rho"] == 0.7


def test_laplace_scale_is_seed_paper_4H_over_eps(data, tmp_path):
    info = release_logs(data["logs"], data["spec_public"], mechanism="laplace", epsilon=1.5,
                        out=tmp_path / "r", seed=1)
    m = info.manifest.to_dict()
    assert m["families"]["visits"]["noise_scale"] == pytest.approx(4 * H / 1.5, rel=1e-12)
    assert m["guarantee"]["definition"] == "pure-DP" and m["guarantee"]["delta"] == 0
    assert m["guarantee"]["rho"] == pytest.approx(1.5 ** 2 / 2)


def test_private_rewards_share_sigma_and_split(data, tmp_path):
    """Three families with equal per-family L2: sigma^2 = 3H/rho, rho/3 each; rewards in 1/q units."""
    info = release_logs(data["logs"], data["spec_private"], rho=1.0, out=tmp_path / "r", seed=1)
    f = info.manifest.to_dict()["families"]
    q = info.manifest.to_dict()["reward_quantum"]
    assert f["visits"]["noise_scale"] ** 2 == pytest.approx(3 * H, rel=1e-12)
    assert f["rewards"]["noise_scale"] == pytest.approx(q * f["visits"]["noise_scale"], rel=1e-12)
    assert f["rewards"]["value_unit"] == 1 / q
    assert sum(x["budget"]["rho"] for x in f.values()) == pytest.approx(1.0, rel=1e-12)


def test_epsilon_delta_target_converts_to_rho(data, tmp_path):
    from privaudit.privacy import accounting

    info = release_logs(data["logs"], data["spec_public"], epsilon=1.0, delta=1e-6, out=tmp_path / "r", seed=1)
    g = info.manifest.to_dict()["guarantee"]
    assert g["rho"] == pytest.approx(accounting.dp_to_zcdp(1.0, 1e-6), rel=1e-12)
    assert g["epsilon"] <= 1.0 + 1e-9 and g["epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert g["epsilon_simple"] > g["epsilon"]  # the simple conversion is looser


# ----------------------------------------------------------------------------- manifest / no seed
def test_manifest_validates_and_dir_holds_no_seed_nor_counts(data, tmp_path):
    out = tmp_path / "r"
    info = release_logs(data["logs"], data["spec_private"], rho=1.0, out=out, seed=SEED)
    m = json.loads((out / "manifest.json").read_text())
    assert schema_errors(m, "release_manifest") == []
    assert m["rng"] == "seeded-insecure" and m["neighbouring"].startswith("substitution")
    assert m["private"] is False  # a seeded release is not private against whoever knows the seed
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "rewards.parquet",
                                                     "transitions.parquet", "visits.parquet"]
    needles = [str(SEED).encode(), hex(SEED).encode(), SEED.to_bytes(8, "little"), SEED.to_bytes(8, "big")]
    for p in out.iterdir():
        blob = p.read_bytes()
        for needle in needles:
            assert needle not in blob, (p.name, needle)
    # no count of the private logs in the manifest: rows, episodes
    numbers = {float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", (out / "manifest.json").read_text())}
    df = data["df"]
    for private in (df.height, df["episode_id"].n_unique()):
        assert float(private) not in numbers
    # the local log is beside the release, not in it, and holds the private facts
    assert info.local_log.parent == out.parent and info.local_log.name == "r.local-log.json"
    local = json.loads(info.local_log.read_text())
    assert local["bounding"]["episodes"] == df["episode_id"].n_unique() and "PRIVATE" in local["WARNING"]


def test_secure_rng_without_seed(data, tmp_path):
    a = release_logs(data["logs"], data["spec_public"], rho=1.0, out=tmp_path / "a")
    b = release_logs(data["logs"], data["spec_public"], rho=1.0, out=tmp_path / "b")
    assert a.manifest.to_dict()["rng"] == "secure" and a.manifest.to_dict()["private"] is True
    assert not np.array_equal(load_release(a.out).visits, load_release(b.out).visits)


def test_seed_reproduces(data, tmp_path):
    a = load_release(release_logs(data["logs"], data["spec_public"], rho=1.0, out=tmp_path / "a", seed=4).out)
    b = load_release(release_logs(data["logs"], data["spec_public"], rho=1.0, out=tmp_path / "b", seed=4).out)
    np.testing.assert_array_equal(a.visits, b.visits)
    np.testing.assert_array_equal(a.transitions_at(2), b.transitions_at(2))


# ----------------------------------------------------------------------------- dense domain, layout
def test_dense_domain_unvisited_cells_get_noise(data, tmp_path):
    rel = load_release(release_logs(data["logs"], data["spec_public"], rho=0.5, out=tmp_path / "r", seed=2).out)
    assert data["n"][:, 7:9].sum() == 0 and data["t"][:, 7:9].sum() == 0  # never visited
    t = _all_transitions(rel)
    assert rel.visits.shape == (H, S, A) and t.shape == (H, S, A, S)
    # sigma^2 = 20: P(round(Z) = 0) = 0.089, so about 91% of the unvisited cells are non-zero;
    # >= 80% fails with probability < 1e-10 over the 7500 transition cells (binomial tail)
    assert (t[:, 7:9] != 0).mean() > 0.8
    assert (rel.visits[:, 7:9] != 0).mean() > 0.75  # 250 cells: P(fail) < 1e-6
    assert (t < 0).any()  # released before any clipping at 0
    pf = pq.ParquetFile(tmp_path / "r" / "transitions.parquet")
    assert pf.num_row_groups == H and pf.metadata.num_rows == H * S * S  # format version 3: a row per (h, s, s')
    assert pf.schema_arrow.names == ["h", "state", "next_state"] + [f"action_{a}" for a in range(A)]
    assert "visits(5, 30, 5)" in repr(rel) and str(int(rel.visits[0, 0, 0])) + "," not in repr(rel)


def test_stationary_release_shapes(data, tmp_path):
    info = release_logs(data["logs"], data["spec_public"], rho=1.0, stationary=True, out=tmp_path / "r", seed=2)
    rel = load_release(info.out)
    assert rel.stationary and rel.visits.shape == (S, A)
    assert rel.transitions_at(0).shape == (S, A, S)
    np.testing.assert_array_equal(rel.transitions_at(0), rel.transitions_at(H - 1))  # pooled for every h
    assert "h" not in pq.ParquetFile(tmp_path / "r" / "visits.parquet").schema_arrow.names
    f = info.manifest.to_dict()["families"]["visits"]
    assert f["l2_sensitivity"] == pytest.approx(H * math.sqrt(2)) and f["shape"] == [S, A]
    diff = rel.visits - data["n"].sum(axis=0)
    assert abs(diff.std() - f["noise_scale"]) < 0.2 * f["noise_scale"]  # 150 cells: loose sanity check


def test_reader_refuses_unknown_version_and_bad_manifest(data, tmp_path):
    out = release_logs(data["logs"], data["spec_public"], rho=1.0, out=tmp_path / "r", seed=2).out
    mpath = out / "manifest.json"
    m = json.loads(mpath.read_text())
    mpath.write_text(json.dumps({**m, "format_version": 4}))
    with pytest.raises(ArtifactError, match="unknown release format version: format_version is 4"):
        load_release(out)
    bad = dict(m)
    del bad["guarantee"]
    mpath.write_text(json.dumps(bad))
    with pytest.raises(ArtifactError, match="guarantee"):
        load_release(out)
    mpath.write_text(json.dumps(m))
    rel = load_release(out)
    with pytest.raises(UsageError, match=r"step in \[0, 5\)"):
        rel.transitions_at(H)


# ----------------------------------------------------------------------------- ledger, errors
def _no_leftovers(parent, allowed):
    assert sorted(p.name for p in parent.iterdir()) == sorted(allowed)


def test_reads_are_watched(data, tmp_path):
    """The read watcher of the refusal tests below sees a release that does read the logs."""
    with watch_reads(data["logs_dir"]) as reads:
        release_logs(data["logs_dir"], data["spec_public"], rho=1.0, out=tmp_path / "r", seed=1)
    assert reads


def test_ledger_refusal_before_reading_or_noise(data, tmp_path, monkeypatch):
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 0.5)
    noise = spy_everywhere(monkeypatch, mechanisms.add_noise)
    with watch_reads(data["logs_dir"]) as reads:
        with pytest.raises(BudgetExceededError):
            release_logs(data["logs_dir"], data["spec_public"], rho=0.6, out=tmp_path / "r", ledger=led)
        res = CliRunner().invoke(main, ["release", str(data["logs_dir"]), "--spec", str(data["spec_public"]),
                                        "--rho", "0.6", "--out", str(tmp_path / "r"), "--ledger", str(led)])
    assert res.exit_code == 3 and "exceed" in res.output
    assert reads == [] and noise == []
    # logs that raise when read (there are none at this path): the refusal is still the budget's
    with pytest.raises(BudgetExceededError):
        release_logs(tmp_path / "no-such-logs", data["spec_public"], rho=0.6, out=tmp_path / "r", ledger=led)
    _no_leftovers(tmp_path, ["budget.jsonl", "budget.jsonl.head", "budget.jsonl.lock"])
    assert len(led.read_text().splitlines()) == 1  # nothing charged


def test_local_log_path_taken_by_a_folder_is_refused_before_reading(data, tmp_path):
    """Before: with a folder at DIR.local-log.json the release drew its noise, wrote DIR, charged the ledger
    and then ended with exit 2 "...: Is a directory; nothing was written (temporary outputs removed)"
    (fresh-user pass)."""
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 1.0)
    before = led.read_bytes()
    (tmp_path / "r.local-log.json").mkdir()
    with watch_reads(data["logs_dir"]) as reads:
        res = CliRunner().invoke(main, ["release", str(data["logs_dir"]), "--spec", str(data["spec_public"]),
                                        "--rho", "0.5", "--out", str(tmp_path / "r"), "--ledger", str(led)])
    assert res.exit_code == 2 and reads == [], res.output
    assert res.output.strip().splitlines()[-1] == (
        f"error: {tmp_path / 'r.local-log.json'} (where the release's private bounding log goes) is not a "
        "file; remove it or choose another `--out`.")
    _no_leftovers(tmp_path, ["budget.jsonl", "budget.jsonl.head", "budget.jsonl.lock", "r.local-log.json"])
    assert led.read_bytes() == before


def test_an_earlier_local_log_is_not_overwritten(data, tmp_path):
    """Before: a release to DIR replaced an existing regular file DIR.local-log.json (the private bounding log
    of an earlier release whose folder was removed) without a word (fresh-user pass). Now: exit 2 before any
    row is read, the file byte-identical, nothing written or charged."""
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 1.0)
    before = led.read_bytes()
    kept = tmp_path / "r.local-log.json"
    kept.write_text('{"earlier": "release"}\n')
    with watch_reads(data["logs_dir"]) as reads:
        res = CliRunner().invoke(main, ["release", str(data["logs_dir"]), "--spec", str(data["spec_public"]),
                                        "--rho", "0.5", "--out", str(tmp_path / "r"), "--ledger", str(led)])
    assert res.exit_code == 2 and reads == [], res.output
    assert res.output.strip().splitlines()[-1].startswith(f"error: {kept} already exists: the private bounding log")
    assert kept.read_text() == '{"earlier": "release"}\n' and led.read_bytes() == before
    _no_leftovers(tmp_path, ["budget.jsonl", "budget.jsonl.head", "budget.jsonl.lock", "r.local-log.json"])


def test_ledger_charged_on_success(data, tmp_path):
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 1.0)
    release_logs(data["logs"], data["spec_public"], rho=0.25, out=tmp_path / "a", ledger=led, seed=1)
    release_logs(data["logs"], data["spec_public"], mechanism="laplace", epsilon=1.0, out=tmp_path / "b",
                 ledger=led, seed=1)
    status = ledger_mod.ledger_status(led)
    assert status["rho_spent"] == "0.75"  # 0.25 + 1^2/2, exact
    with pytest.raises(BudgetExceededError):
        release_logs(data["logs"], data["spec_public"], rho=0.3, out=tmp_path / "c", ledger=led)
    assert not (tmp_path / "c").exists()


def _cli(*args):
    return CliRunner().invoke(main, ["release", *map(str, args)])


@pytest.mark.parametrize("extra,code", [
    (["--rho", "0"], 2), (["--rho", "-1"], 2), (["--rho", "nan"], 2),
    (["--mechanism", "gaussian", "--epsilon", "1"], 2),  # gaussian needs delta (--epsilon alone: Laplace)
    (["--epsilon", "1", "--delta", "1.5"], 2),
    (["--rho", "1", "--epsilon", "1", "--delta", "1e-5"], 2),
    (["--mechanism", "laplace", "--rho", "1"], 2),
    (["--mechanism", "laplace", "--epsilon", "1", "--delta", "1e-5"], 2),
    ([], 2),
    (["--rho", "1", "--noise", "rounded"], 2),  # numpy float noise: no certified guarantee
])
def test_bad_budget_arguments_exit_2_nothing_written(data, tmp_path, extra, code):
    res = _cli(data["logs"], "--spec", data["spec_public"], "--out", tmp_path / "r", *extra)
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    _no_leftovers(tmp_path, [])


def test_missing_spec_and_existing_out(data, tmp_path):
    res = _cli(data["logs"], "--spec", tmp_path / "nope.json", "--rho", "1", "--out", tmp_path / "r")
    assert res.exit_code == 2 and "nope.json" in res.output
    (tmp_path / "r").mkdir()
    res = _cli(data["logs"], "--spec", data["spec_public"], "--rho", "1", "--out", tmp_path / "r")
    assert res.exit_code == 2 and "exists" in res.output
    _no_leftovers(tmp_path, ["r"])
    with pytest.raises(UsageError):
        release_logs(data["logs"], data["spec_public"], rho=1, out=tmp_path / "s", seed=-1)


def test_invalid_logs_same_located_errors_as_validate(data, tmp_path):
    bad = data["df"].with_columns(
        pl.when(pl.col("episode_id") == 3).then(S + 4).otherwise(pl.col("state")).alias("state"),
        pl.when(pl.col("episode_id") == 8).then(None).otherwise(pl.col("action")).alias("action"))
    logs = tmp_path / "in" / "bad.parquet"
    logs.parent.mkdir()
    bad.write_parquet(logs)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    res = _cli(logs, "--spec", data["spec_public"], "--rho", "1", "--out", out_dir / "r")
    assert res.exit_code == 1
    val = CliRunner().invoke(main, ["validate", str(logs), "--spec", str(data["spec_public"])])
    located = [ln.strip() for ln in val.output.splitlines() if ln.strip().startswith("[")]
    assert any("state_out_of_range" in ln for ln in located) and any("null_value" in ln for ln in located)
    for ln in located:
        assert ln in res.output
    _no_leftovers(out_dir, [])


def test_bounding_rules_do_not_refuse_but_are_reported_locally(tmp_path):
    """More than k episodes per unit, episodes longer than H and rewards out of range are bounded."""
    rng = np.random.default_rng(9)
    df = random_log(rng, 120, H=H, S=S, A=A, terminals=TERMINALS, max_len=H + 3, n_units=30,
                    reward_spill=0.5)
    logs = tmp_path / "logs.parquet"
    df.write_parquet(logs)
    spec = write_spec(tmp_path, H=H, S=S, A=A, terminals=TERMINALS, unit_column="patient", k=2)
    val = CliRunner().invoke(main, ["validate", str(logs), "--spec", str(spec), "--accept-repairs"])
    # validate and release agree (issue 13 item 3): these rules are repaired, not fatal (both given
    # --accept-repairs: the shares here are far above --max-repair-share)
    assert val.exit_code == 0 and "too_many_episodes" in val.output and "episode_too_long" in val.output
    assert "valid for release" in val.output and "repaired by contribution bounding" in val.output
    assert "INVALID" not in val.output
    res = _cli(logs, "--spec", spec, "--rho", "1", "--out", tmp_path / "r", "--seed", "1", "--accept-repairs")
    assert res.exit_code == 0, res.output
    local = json.loads((tmp_path / "r.local-log.json").read_text())["bounding"]
    assert local["episodes_dropped"] > 0 and local["steps_dropped"] > 0 and local["rewards_clipped"] > 0
    assert "contribution bounding" in res.output  # the stderr summary (CliRunner merges streams)
    m = load_release(tmp_path / "r").manifest.to_dict()
    assert m["privacy_unit"] == {"column": "patient", "file_column": "patient", "max_episodes": 2}
    assert "local-log" not in " ".join(p.name for p in (tmp_path / "r").iterdir())


def _two_stays_of_one_patient(tmp_path):
    """Patient 7 has two stays (episodes 0 and 1); column ``stay_owner`` holds episode-level ids."""
    df = pl.DataFrame({"episode_id": [0, 0, 1, 1], "step": [0, 1, 0, 1], "state": [0, 1, 2, 3],
                       "action": [0, 1, 0, 1], "reward": [0.0, 1.0, 0.0, 1.0], "next_state": [1, 2, 3, 0],
                       "patient_id": [7, 7, 7, 7], "stay_owner": [100, 100, 101, 101]})
    logs = tmp_path / "logs.parquet"
    df.write_parquet(logs)
    return logs


def test_unit_mapping_that_disagrees_with_the_privacy_unit_is_refused(tmp_path):
    """columns.unit_id must not silently regroup the units behind privacy_unit.column (issue 10 item 2).

    On the old behaviour the release grouped on ``stay_owner``, kept both stays of patient 7 with
    k = 1 and wrote a manifest promising patient-level k = 1.
    """
    logs = _two_stays_of_one_patient(tmp_path)
    doc = json.loads(write_spec(tmp_path, H=H, S=S, A=A, terminals=TERMINALS, unit_column="patient_id").read_text())
    doc["columns"] = {"unit_id": "stay_owner"}
    spec = tmp_path / "mismatch.json"
    spec.write_text(json.dumps(doc))
    # one of the patient's two stays is dropped (k = 1): half the episodes, accepted
    res = _cli(logs, "--spec", spec, "--rho", "1", "--out", tmp_path / "r", "--seed", "1", "--accept-repairs")
    assert res.exit_code == 2, res.output
    assert "$.columns.unit_id" in res.output and "$.privacy_unit.column" in res.output
    assert "'stay_owner'" in res.output and "'patient_id'" in res.output and str(spec) in res.output
    assert "Traceback" not in res.output and not (tmp_path / "r").exists()
    # a unit mapping without a declared unit is refused too (it would be ignored: each episode its own unit)
    doc["privacy_unit"]["column"] = None
    spec.write_text(json.dumps(doc))
    # one of the patient's two stays is dropped (k = 1): half the episodes, accepted
    res = _cli(logs, "--spec", spec, "--rho", "1", "--out", tmp_path / "r", "--seed", "1", "--accept-repairs")
    assert res.exit_code == 2 and "absent" in res.output and "$.columns.unit_id" in res.output


@pytest.mark.parametrize("unit_column,mapped,expect", [
    ("patient_id", None, "patient_id"), ("patient_id", "patient_id", "patient_id"), (None, None, "stay")])
def test_manifest_records_the_file_column_grouped_on(tmp_path, unit_column, mapped, expect):
    logs = _two_stays_of_one_patient(tmp_path)
    pl.read_parquet(logs).rename({"episode_id": "stay"}).write_parquet(logs)
    doc = json.loads(write_spec(tmp_path, H=H, S=S, A=A, terminals=TERMINALS, unit_column=unit_column).read_text())
    doc["columns"] = {"episode_id": "stay"} | ({"unit_id": mapped} if mapped else {})
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps(doc))
    # one of the patient's two stays is dropped (k = 1): half the episodes, accepted
    res = _cli(logs, "--spec", spec, "--rho", "1", "--out", tmp_path / "r", "--seed", "1", "--accept-repairs")
    assert res.exit_code == 0, res.output
    m = load_release(tmp_path / "r").manifest.to_dict()
    assert m["privacy_unit"]["file_column"] == expect and m["privacy_unit"]["max_episodes"] == 1
    kept = json.loads((tmp_path / "r.local-log.json").read_text())["bounding"]
    assert kept["episodes_dropped"] == (1 if unit_column else 0)  # k = 1: one of patient 7's two stays


def test_release_checks_its_spec(data, tmp_path):
    from privaudit.core.spec import load_spec

    rel = load_release(release_logs(data["logs"], data["spec_public"], rho=1.0, out=tmp_path / "r", seed=2).out)
    rel.check_spec(load_spec(data["spec_public"]))
    with pytest.raises(SpecError, match="spec hash"):  # the wrong spec given: a spec error (exit 2)
        rel.check_spec(load_spec(data["spec_private"]))


def test_reward_quantum_coarsens_only_for_exact_gaussian():
    q = mechanism_mod.REWARD_QUANTUM
    assert mechanism_mod.reward_quantum(6.3, "gaussian", "rounded") == q
    assert mechanism_mod.reward_quantum(6.3, "gaussian", "exact") == q  # 6300 <= 1e4
    assert mechanism_mod.reward_quantum(60.0, "gaussian", "exact") == q // 10  # 60000 > 1e4, 6000 <= 1e4
    assert mechanism_mod.reward_quantum(2e4, "gaussian", "exact") == 1
    assert mechanism_mod.reward_quantum(1e3, "laplace", "exact") == q


def test_reader_refuses_a_version_1_table_out_of_order(tmp_path):
    """Format version 1 (index columns beside value) is still read, and still checked cell by cell."""
    import shutil

    import pyarrow as pa

    out = tmp_path / "r"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "release_v1" / "per_step", out)
    path = out / "transitions.parquet"
    tab = pq.read_table(path)
    ns = tab.column("next_state").to_numpy().copy()
    ns[[5, 6]] = ns[[6, 5]]  # two cells swapped: same multiset, wrong order
    tab = tab.set_column(tab.schema.get_field_index("next_state"), "next_state", pa.array(ns))
    pq.write_table(tab, path, row_group_size=4 * 2 * 4)
    rel = load_release(out)
    with pytest.raises(ArtifactError, match="corrupt"):
        rel.transitions_at(0)
    rel.transitions_at(1)  # the other row groups are intact


def test_two_releases_at_once_one_budget(data, tmp_path):
    """Budget for one release only: exactly one of two concurrent releases is written and charged."""
    import subprocess
    import sys

    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 1.0)
    procs = [subprocess.Popen([sys.executable, "-c", "from privaudit.cli import main; main()",
                               "release", str(data["logs"]),
                               "--spec", str(data["spec_public"]), "--rho", "0.75",
                               "--out", str(tmp_path / f"r{i}"), "--ledger", str(led)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
    codes = sorted(p.wait(timeout=120) for p in procs)
    assert codes == [0, 3]
    written = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    assert len(written) == 1 and not any(p.name.startswith(".") for p in tmp_path.iterdir())
    assert ledger_mod.ledger_status(led)["rho_spent"] == "0.75"


# ----------------------------------------------------------------------------- manifest consistency
def _tamper(m, edit):
    m = json.loads(json.dumps(m))
    edit(m)
    return m


def _set(path, value):
    def edit(m):
        node = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


@pytest.fixture(scope="module")
def released(data, tmp_path_factory):
    """One Gaussian release with private rewards and one Laplace release (module-wide, read-only)."""
    d = tmp_path_factory.mktemp("tamper")
    g = release_logs(data["logs"], data["spec_private"], rho=1.0, out=d / "g", seed=3).out
    lap = release_logs(data["logs"], data["spec_public"], mechanism="laplace", epsilon=2.0, out=d / "l",
                       seed=3).out
    return {"gaussian": g, "laplace": lap}


def _copy_with_manifest(src, dst, manifest):
    import shutil

    shutil.copytree(src, dst)
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


@pytest.mark.parametrize("kind,edit,match", [
    ("gaussian", _set(["guarantee", "rho"], 0.01), "guarantee.rho = 0.01 is below"),
    ("gaussian", _set(["guarantee", "epsilon"], 0.5), "guarantee.epsilon = 0.5 at delta"),
    ("gaussian", _set(["guarantee", "delta"], 1e-12), "guarantee.epsilon = .* at delta = 1e-12"),
    ("gaussian", _set(["families", "transitions", "noise_scale"], 0.01), "families.transitions.budget.rho"),
    ("gaussian", _set(["families", "visits", "l2_sensitivity"], 0.5), "visits.l2_sensitivity = 0.5 is below"),
    ("gaussian", _set(["families", "rewards", "l1_sensitivity"], 10.0), "rewards.l1_sensitivity = 10.0 is below"),
    ("gaussian", _set(["families", "rewards", "value_unit"], 1.0), "rewards.value_unit"),
    ("gaussian", _set(["reward_quantum"], 1), "reward_quantum 1 differs"),
    ("gaussian", _set(["privacy_unit", "max_episodes"], 3), "visits.l1_sensitivity = 10.0 is below the formula.s 30.0"),
    ("laplace", _set(["guarantee", "epsilon"], 1.0), "guarantee.epsilon = 1.0 is below"),
    ("laplace", _set(["families", "visits", "noise_scale"], 1e-3), "families.visits.budget.epsilon"),
    ("laplace", _set(["guarantee", "definition"], "zCDP"), "a Laplace release is 'pure-DP'"),
])
def test_tampered_manifest_refused_by_reader_and_train(released, tmp_path, kind, edit, match):
    src = released[kind]
    m = json.loads((src / "manifest.json").read_text())
    assert load_release(src).manifest.to_dict() == m  # the untouched release loads (and round-trips)
    out = _copy_with_manifest(src, tmp_path / "t", _tamper(m, edit))
    with pytest.raises(ArtifactError, match=match):
        load_release(out)
    res = CliRunner().invoke(main, ["train", "--release", str(out), "--algo", "dp-apvi",
                                    "--out", str(tmp_path / "pol")])
    assert res.exit_code == 1, res.output
    assert "inconsistent with its own mechanism facts" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "pol").exists()


def test_consistent_sigma_edit_still_refused_by_guarantee(released, tmp_path):
    # sigma of every family halved and every share multiplied by 4 to match, guarantee left at rho = 1:
    # refused by the guarantee. Doubling sigma makes the stated rho pessimistic, which is allowed.
    src = released["gaussian"]
    m = json.loads((src / "manifest.json").read_text())

    def scale_sigma(factor, event_too=True):
        def edit(m):
            for fam in m["families"].values():
                fam["noise_scale"] *= factor
                fam["budget"]["rho"] /= factor ** 2
            if event_too:  # the stored event, edited consistently (its copy in the guarantee's envelope too)
                for leaf in m["event"]["events"] + m["guarantee"]["event"]["events"]:
                    leaf["sigma"] *= factor
        return edit
    with pytest.raises(ArtifactError, match=r"guarantee.rho = 1.0 is below the rho = (4.0|3.9999)"):
        load_release(_copy_with_manifest(src, tmp_path / "h", _tamper(m, scale_sigma(0.5))))
    assert load_release(_copy_with_manifest(src, tmp_path / "d", _tamper(m, scale_sigma(2.0)))).H == H
    # families edited, stored event left: refused before the guarantee is even derived
    with pytest.raises(ArtifactError, match="stored event differs"):
        load_release(_copy_with_manifest(src, tmp_path / "e", _tamper(m, scale_sigma(2.0, event_too=False))))


@pytest.mark.parametrize("kind", ["gaussian", "laplace"])
def test_manifest_without_event_still_read_and_checked(released, tmp_path, kind):
    """Manifests written before events existed (no ``event``) are read through the event rebuilt
    from their families, with the same checks."""
    src = released[kind]
    m = json.loads((src / "manifest.json").read_text())
    old = {k: v for k, v in m.items() if k != "event"}  # and the guarantee without the envelope's keys, as then
    old["guarantee"] = {k: v for k, v in m["guarantee"].items() if k not in ENVELOPE_KEYS or k == "sampler"}
    assert load_release(_copy_with_manifest(src, tmp_path / "old", old)).manifest.to_dict() == old
    key = "rho" if kind == "gaussian" else "epsilon"
    bad = json.loads(json.dumps(old))
    bad["guarantee"][key] /= 2
    with pytest.raises(ArtifactError, match=f"guarantee.{key} = .* is below"):
        load_release(_copy_with_manifest(src, tmp_path / "bad", bad))


def test_untouched_release_trains(released, tmp_path):
    res = CliRunner().invoke(main, ["train", "--release", str(released["gaussian"]), "--algo", "dp-apvi",
                                    "--out", str(tmp_path / "pol")])
    assert res.exit_code == 0, res.output


# ----------------------------------------------------------------------------- size limit, corrupt ledger
def test_huge_domain_refused_before_reading(data, tmp_path):
    """Refused from the spec alone: the logs folder is never listed or opened (watch_reads), and nothing of
    the 5e12-cell tables is allocated (that would be a MemoryError or a numpy traceback, not this message).
    No wall-time limit: speed goals live in benchmarks/."""
    spec = write_spec(tmp_path, "huge.json", H=H, S=1_000_000, A=A, terminals=TERMINALS)
    with watch_reads(data["logs_dir"]) as reads:
        res = _cli(data["logs_dir"], "--spec", spec, "--rho", "1", "--out", tmp_path / "r")
    assert res.exit_code == 2, res.output
    assert "too large" in res.output and "1000000*5*1000000" in res.output and "Traceback" not in res.output
    assert reads == []
    res = _cli(tmp_path / "no-such-logs", "--spec", spec, "--rho", "1", "--out", tmp_path / "r")
    assert res.exit_code == 2 and "too large" in res.output, res.output  # unreadable logs: never reached
    _no_leftovers(tmp_path, ["huge.json"])


def test_memory_estimate_against_physical_memory(data, tmp_path, monkeypatch):
    from privaudit.core.spec import load_spec

    spec = load_spec(data["spec_private"])
    est = release_size.release_memory_estimate(spec, stationary=False, n_sa_families=2)
    # hand computation: 4 x 8 bytes x (S*A*S + 2 * H*S*A)
    assert est == {"slice_cells": S * A * S, "bytes": 4 * 8 * (S * A * S + 2 * H * S * A)}
    assert release_size.physical_memory_bytes() > est["bytes"]
    monkeypatch.setattr(release_size, "physical_memory_bytes", lambda: est["bytes"] - 1)
    with pytest.raises(UsageError, match=r"estimated peak working memory .* above the physical memory"):
        release_logs(data["logs"], data["spec_private"], rho=1.0, out=tmp_path / "r", seed=1)
    monkeypatch.setattr(release_size, "physical_memory_bytes", lambda: est["bytes"])
    release_logs(data["logs"], data["spec_private"], rho=1.0, out=tmp_path / "r", seed=1)


def test_corrupt_ledger_refuses_release_before_reading(data, tmp_path, monkeypatch):
    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 1)
    with open(led, "a") as f:  # the tester's hand-written refill
        f.write(json.dumps({"type": "charge", "seq": 1, "dataset_id": "tiny-release", "rho": "-10",
                            "description": "x", "timestamp": "2025-01-01T00:00:00Z"}) + "\n")
    noise = spy_everywhere(monkeypatch, mechanisms.add_noise)
    with watch_reads(data["logs_dir"]) as reads:
        res = _cli(data["logs_dir"], "--spec", data["spec_public"], "--rho", "5", "--out", tmp_path / "r",
                   "--ledger", led)
    # the hand-written line is not chained: the ledger refuses to spend (exit 3, the line named)
    assert res.exit_code == 3 and "line 2" in res.output and "not a version-2 ledger entry" in res.output, res.output
    assert reads == [] and noise == []
    res = _cli(tmp_path / "no-such-logs", "--spec", data["spec_public"], "--rho", "5", "--out", tmp_path / "r",
               "--ledger", led)
    assert res.exit_code == 3 and "line 2" in res.output, res.output  # the ledger's error, not the logs'
    _no_leftovers(tmp_path, ["budget.jsonl", "budget.jsonl.head", "budget.jsonl.lock"])


@pytest.mark.parametrize("budget, match", [
    (["--rho=1e20"], "smaller privacy budget"), (["--rho=1e12"], "smaller privacy budget"),
    (["--mechanism", "laplace", "--epsilon", "1e8"], "smaller privacy budget"),
    (["--rho=1e-7"], "larger budget")])
def test_budgets_the_exact_sampler_cannot_serve_are_usage_errors(tmp_path, budget, match):
    """A huge budget (sigma or b so small that P(Z != 0) is far below 2^-64) or a tiny one (sigma above
    GAUSSIAN_SIGMA_MAX): exit 2 with advice the tool accepts, no traceback, nothing written."""
    out = tmp_path / "rel"
    res = CliRunner().invoke(main, ["release", "sample_data/icu_sepsis_clinicians_20k.parquet", "--spec",
                                    "sample_data/icu_sepsis_spec.json", *budget, "--stationary", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert match in res.output and "rounded" not in res.output and "Traceback" not in res.output
    assert not out.exists()


def test_rho_whose_epsilon_is_exactly_zero_says_so(tmp_path):
    """rho = 1e-12 at delta = 1e-6: the tight conversion gives epsilon exactly 0 (not a rounded 0)."""
    res = CliRunner().invoke(main, ["release", "sample_data/icu_sepsis_clinicians_20k.parquet", "--spec",
                                    "sample_data/icu_sepsis_spec.json", "--rho=1e-12", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "epsilon is exactly 0" in res.output and "(0, 1e-6)-DP" in res.output


def test_private_flag_must_match_the_rng(data, tmp_path):
    """A manifest edited to say private: true over seeded noise is refused; one without the flag (older) reads."""
    src = tmp_path / "r"
    release_logs(data["logs"], data["spec_public"], rho=1.0, out=src, seed=SEED)
    m = json.loads((src / "manifest.json").read_text())
    (src / "manifest.json").write_text(json.dumps(dict(m, private=True)))
    with pytest.raises(ArtifactError, match="private is True but rng is 'seeded-insecure'"):
        load_release(src)
    old = {k: v for k, v in m.items() if k != "private"}
    (src / "manifest.json").write_text(json.dumps(old))
    assert load_release(src).manifest.rng == "seeded-insecure"


def test_release_options_carry_the_run_and_refuse_a_second_budget(data, tmp_path):
    """ReleaseOptions: the ledger entry names options.run and options.run_output; a resolved budget and rho
    together are refused before anything is written."""
    from privaudit.privacy.budget import resolve_budget

    led = tmp_path / "budget.jsonl"
    ledger_mod.init_ledger(led, "tiny-release", 10)
    release_logs(data["logs"], data["spec_private"], rho=0.5, out=tmp_path / "r", ledger=led, seed=1,
                 options=ReleaseOptions(run="run-42", run_output=tmp_path / "pipeline-out"))
    charged = [e for e in map(json.loads, led.read_text().splitlines()) if "run" in e]
    assert [(e["run"], e["output"]) for e in charged] == [("run-42", str((tmp_path / "pipeline-out").absolute()))]
    with pytest.raises(UsageError, match=r"options\.budget"):
        release_logs(data["logs"], data["spec_private"], rho=0.5, out=tmp_path / "r2",
                     options=ReleaseOptions(budget=resolve_budget(rho=0.5)))
    assert not (tmp_path / "r2").exists()
    info = release_logs(data["logs"], data["spec_private"], out=tmp_path / "r3", seed=1,
                        options=ReleaseOptions(budget=resolve_budget(rho=0.5)))
    assert info.manifest.rho == pytest.approx(0.5)
