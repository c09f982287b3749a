"""Budget ledger: exact amounts, refusal (exit 3), concurrency, corrupt files, CLI."""

from __future__ import annotations

import json
import multiprocessing as mp
from fractions import Fraction

import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.errors import ArtifactError, BudgetExceededError, UsageError
from privaudit.privacy.ledger import (charge, check_budget, init_ledger, ledger_status,
                                      rho_of_pure_dp)


@pytest.fixture
def ledger(tmp_path):
    path = tmp_path / "d.ledger"
    init_ledger(path, "icu", "0.3")
    return path


def test_exact_arithmetic_where_floats_fail(ledger):
    # 0.1 + 0.2 > 0.3 in floating point; the ledger adds exactly.
    assert 0.1 + 0.2 > 0.3
    charge(ledger, "icu", 0.1, "first")
    assert check_budget(ledger, "icu", 0.2) == Fraction(1, 10) * 2
    charge(ledger, "icu", 0.2, "second")
    st = ledger_status(ledger)
    assert (st["rho_total"], st["rho_spent"], st["rho_remaining"]) == ("0.3", "0.3", "0")
    assert [e["seq"] for e in st["entries"]] == [1, 2]
    with pytest.raises(BudgetExceededError) as info:
        charge(ledger, "icu", 1e-300, "too much")
    assert info.value.exit_code == 3
    assert len(ledger.read_text().splitlines()) == 3  # nothing appended


def test_check_budget_refuses_without_writing(ledger):
    before = ledger.read_bytes()
    with pytest.raises(BudgetExceededError, match="remaining 0.3"):
        check_budget(ledger, "icu", "0.31")
    assert ledger.read_bytes() == before


def test_pure_dp_charge():
    assert rho_of_pure_dp(0.5) == Fraction(1, 8)
    assert rho_of_pure_dp("0.1") == Fraction(1, 200)


def test_init_refuses_existing_and_bad_values(tmp_path, ledger):
    with pytest.raises(UsageError, match="already exists"):
        init_ledger(ledger, "icu", 1)
    for bad in (0, -1, "abc", float("nan"), float("inf"), True):
        with pytest.raises(UsageError):
            init_ledger(tmp_path / f"x{bad}.ledger", "icu", bad)
    with pytest.raises(UsageError):
        init_ledger(tmp_path / "y.ledger", "", 1)


def test_wrong_dataset_missing_file_and_corruption(tmp_path, ledger):
    with pytest.raises(UsageError, match="dataset 'icu'"):
        charge(ledger, "other", 0.1, "x")
    with pytest.raises(UsageError, match="no such ledger"):
        check_budget(tmp_path / "none.ledger", "icu", 0.1)
    with open(ledger, "a") as f:
        f.write('{"type": "charge", "seq": 1, "rho": "0.1"')  # interrupted write
    with pytest.raises(ArtifactError, match="incomplete"):
        charge(ledger, "icu", 0.1, "x")
    bad = tmp_path / "v.ledger"
    init_ledger(bad, "icu", 1)
    head = json.loads(bad.read_text())
    head["format_version"] = 99
    bad.write_text(json.dumps(head) + "\n")
    with pytest.raises(ArtifactError, match="format_version"):
        ledger_status(bad)


def _worker(path, barrier, n, out):
    barrier.wait()
    ok = refused = 0
    for i in range(n):
        try:
            charge(path, "icu", "0.01", f"p{i}")
            ok += 1
        except BudgetExceededError:
            refused += 1
    out.put((ok, refused))


def test_concurrent_charges_never_lose_or_exceed(tmp_path):
    path = tmp_path / "c.ledger"
    init_ledger(path, "icu", "0.5")  # room for exactly 50 charges of 0.01
    procs, n = 4, 20
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(path, barrier, n, out)) for _ in range(procs)]
    for p in ps:
        p.start()
    results = [out.get(timeout=60) for _ in ps]
    for p in ps:
        p.join(timeout=60)
    assert sum(r[0] for r in results) == 50
    assert sum(r[1] for r in results) == procs * n - 50
    st = ledger_status(path)
    assert st["n_entries"] == 50 and st["rho_spent"] == "0.5" and st["rho_remaining"] == "0"
    assert [e["seq"] for e in st["entries"]] == list(range(1, 51))


def test_cli_init_show_charge(tmp_path):
    runner = CliRunner()
    path = str(tmp_path / "cli.ledger")
    r = runner.invoke(main, ["budget", "init", path, "--dataset", "icu", "--rho-total", "1"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["budget", "init", path, "--dataset", "icu", "--rho-total", "1"])
    assert r.exit_code == 2 and "already exists" in r.output
    r = runner.invoke(main, ["budget", "charge", path, "--dataset", "icu", "--epsilon", "1",
                             "--description", "laplace table"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["budget", "charge", path, "--dataset", "icu", "--rho", "0.6",
                             "--description", "too much"])
    assert r.exit_code == 3 and "would exceed" in r.output
    r = runner.invoke(main, ["budget", "show", path, "--json"])
    assert r.exit_code == 0
    st = json.loads(r.output)
    assert st["rho_spent"] == "0.5" and st["rho_remaining"] == "0.5" and st["n_entries"] == 1
    r = runner.invoke(main, ["budget", "show", path])
    assert "remaining 0.5" in r.output
