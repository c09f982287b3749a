"""Budget ledger: exact amounts, refusal (exit 3), concurrency, corrupt files, CLI."""

from __future__ import annotations

import json
import os
import re
import multiprocessing as mp
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.core.errors import ArtifactError, BudgetExceededError, LedgerIntegrityError, UsageError
from privaudit.privacy import ledger_io, ledger_key
from privaudit.privacy.ledger import (charge, check_budget, init_ledger, ledger_status,
                                      rho_of_pure_dp)
from privaudit.core.schemas import schema_errors
from tests._spy import watch_reads
from tests.conftest import tiny_spec_doc


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


@pytest.mark.parametrize("deny", ["file", "folder"])
def test_read_only_ledger_refused_before_any_work(tmp_path, monkeypatch, deny):
    """Before: `release --ledger` on a read-only ledger read and bounded the logs and drew its noise, then
    failed at the charge with "...: Permission denied; ... Check that the output location is writable"
    (fresh-user pass). Tests run as root, so ``os.access`` is made to deny the write."""
    path = tmp_path / "d.ledger"
    init_ledger(path, "tiny", "1")
    before = path.read_bytes()
    denied = str(path if deny == "file" else tmp_path)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: not (str(p) == denied and mode & os.W_OK)
                        and real(p, mode, *a, **k))
    with pytest.raises(UsageError, match=rf"{path}: the ledger cannot be charged: "
                                         + ("its folder " if deny == "folder" else "")
                                         + rf"{denied} is not writable by this user"):
        check_budget(path, "tiny", "0.1")
    (tmp_path / "spec.json").write_text(json.dumps(tiny_spec_doc()))
    logs = tmp_path / "logs.parquet"
    pl.DataFrame({"episode_id": [0], "step": [0], "state": [0], "action": [0], "reward": [1.0],
                  "next_state": [3]}).write_parquet(logs)
    with watch_reads(logs) as reads:
        res = CliRunner().invoke(main, ["release", str(logs), "--spec", str(tmp_path / "spec.json"), "--rho", "0.1",
                                        "--ledger", str(path), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "is not writable by this user" in res.output.strip().splitlines()[-1], res.output
    assert reads == [] and not (tmp_path / "r").exists() and path.read_bytes() == before


def test_a_folder_as_ledger_is_named_a_folder(tmp_path):
    """Before: a folder given as `release --ledger` (or train, pipeline) was "no such ledger. Create it with
    `privaudit budget init ...`", and init then refused the path."""
    (tmp_path / "budget.jsonl").mkdir()
    with pytest.raises(UsageError, match="is a folder, not a ledger file"):
        check_budget(tmp_path / "budget.jsonl", "icu", 0.1)
    with pytest.raises(UsageError, match="is a folder, not a ledger file"):
        charge(tmp_path / "budget.jsonl", "icu", 0.1, "x")


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


@pytest.mark.parametrize("text,needle", [
    ('{"format_version": 1, "horizon": 20}', "line 1: not a privaudit ledger header"),  # a spec, no final newline
    ("# privaudit\n\nA README.\n", "line 1: not valid JSON (Expecting value): this is not a privaudit ledger"),
    (b"PAR1\x15\x04\x80\xff\n", "line 1: not valid JSON (a binary file): this is not a privaudit ledger"),
    ("[1, 2]\n", "line 1: must be a JSON object, found list: this is not a privaudit ledger"),
])
def test_a_file_that_is_no_ledger_gets_no_lock_file_beside_it(tmp_path, text, needle):
    """Before: `pipeline --ledger spec.json` said "the last line is incomplete (an interrupted write?)" and
    left spec.json.lock in the spec's folder (fresh-user pass); any file given as a ledger got a FILE.lock.
    A file whose line 1 is not JSON (a README, a Parquet log) was called "corrupt; restore it from a backup",
    though it never was a ledger (fresh-user pass)."""
    path = tmp_path / "spec.json"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    before = path.read_bytes()
    for call in (lambda: check_budget(path, "icu", 0.1), lambda: charge(path, "icu", 0.1, "x"),
                 lambda: ledger_status(path)):
        with pytest.raises(ArtifactError, match=re.escape(needle)):
            call()
    res = CliRunner().invoke(main, ["budget", "show", str(path)])
    assert res.exit_code == 1 and needle in res.output and "Traceback" not in res.output
    assert "corrupt" not in res.output and len(res.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]
    assert path.read_bytes() == before


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


def test_a_wait_for_the_lock_is_said_on_stderr_then_times_out_with_one_line(ledger, monkeypatch, capsys):
    """Another process's lock: a silent 300 s wait looked hung; now one stderr line says what it waits for."""
    from filelock import FileLock
    monkeypatch.setattr(ledger_io, "LOCK_NOTICE_AFTER", 0.05)
    monkeypatch.setattr(ledger_io, "LOCK_TIMEOUT", 0.3)
    holder = FileLock(str(ledger) + ".lock")  # a second open file: flock blocks it as another process's
    with holder:
        with pytest.raises(UsageError, match="locked by another process for more than 0.3 s"):
            check_budget(ledger, "icu", "0.1")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "waiting for the ledger's lock" in err and "up to 0.3 s" in err
    assert check_budget(ledger, "icu", "0.1") == Fraction(3, 10)  # free again: no notice
    assert capsys.readouterr().err == ""


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
    before = Path(path).read_bytes()
    for empty in ("", "  "):  # before: charged with no record of what spent it (fresh-user pass)
        r = runner.invoke(main, ["budget", "charge", path, "--dataset", "icu", "--rho", "0.1", "--description", empty])
        assert r.exit_code == 2 and r.output.strip() == ("error: `--description` is empty: say what was released "
                                                         "(it is kept in the ledger)."), r.output
    assert Path(path).read_bytes() == before
    r = runner.invoke(main, ["budget", "show", path, "--json"])
    assert r.exit_code == 0
    st = json.loads(r.output)
    assert st["rho_spent"] == "0.5" and st["rho_remaining"] == "0.5" and st["n_entries"] == 1
    r = runner.invoke(main, ["budget", "show", path])
    assert "remaining 0.5" in r.output


def test_a_description_prints_on_one_line(tmp_path):
    """`budget charge --description $'a\\n  #9 ...'` was charged and `budget show` printed its second line as if it
    were an entry of its own (fresh-user pass): the CLI refuses a control character, and `show` escapes one that a
    Python caller wrote, so each entry is one line."""
    path = tmp_path / "b.ledger"
    init_ledger(path, "icu", "1")
    before = path.read_bytes()
    forged = "laplace table\n  #2   2026-01-01T00:00:00Z  rho=0.000001     nothing"
    r = CliRunner().invoke(main, ["budget", "charge", str(path), "--dataset", "icu", "--rho", "0.5",
                                  "--description", forged])
    assert r.exit_code == 2 and "line break" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert path.read_bytes() == before
    charge(path, "icu", "0.5", forged)  # the Python API keeps the text as given
    r = CliRunner().invoke(main, ["budget", "show", str(path)])
    assert r.exit_code == 0
    entries = [line for line in r.output.splitlines() if re.match(r"\s+#\d", line)]
    assert entries == ["  #1   " + ledger_status(path)["entries"][0]["timestamp"]
                       + "  rho=0.5          laplace table\\n  #2   2026-01-01T00:00:00Z  rho=0.000001     nothing"]


# ----------------------------------------------------------------------------- corrupt ledgers
def _append(path, obj):
    with open(path, "a") as f:
        f.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")


def _forge(path, obj, key=None):
    """Append ``obj`` as a correctly chained line and move the head to it: what an editor who
    knows the (absent) key could do. The semantic checks must still refuse bad content."""
    if isinstance(obj, str):
        return _append(path, obj)
    entries = [json.loads(x) for x in path.read_text().splitlines()]
    line = ledger_key.sealed({**obj, "prev": entries[-1]["digest"]}, key)
    _append(path, line)
    ledger_io.write_head(path, entries[0]["ledger_id"], line, key)


def _charge_line(seq, rho, dataset="icu"):
    return {"type": "charge", "seq": seq, "dataset_id": dataset, "rho": rho,
            "description": "hand-written", "timestamp": "2025-01-01T00:00:00Z"}


@pytest.mark.parametrize("bad,where", [
    (_charge_line(1, "-10"), "line 2: `rho` must be > 0"),
    (_charge_line(1, "0"), "line 2: `rho` must be > 0"),
    (_charge_line(1, "nan"), "line 2: `rho` is not a number"),
    (_charge_line(1, "inf"), "line 2: `rho` is not a number"),
    (_charge_line(1, "1e400"), "line 2: `rho` must be a finite number"),
    (_charge_line(1, "1e-400"), "line 2: `rho` is too small"),
    (_charge_line(1, 0.1), "line 2: not a version-2 ledger entry ($.rho: 0.1 is not of type 'string')"),
    (_charge_line(1, "0.1", dataset="other"), "line 2: charge for dataset 'other'"),
    (_charge_line(2, "0.1"), "line 2: charge sequence numbers must be contiguous"),
    ("this is not json", "line 2: not valid JSON"),
    ("[1, 2]", "line 2: must be a JSON object"),
])
def test_corrupt_charge_line_refused_everywhere(tmp_path, bad, where):
    path = tmp_path / "l.jsonl"
    init_ledger(path, "icu", 1)
    _forge(path, bad)
    before = path.read_bytes()
    for read in (lambda: ledger_status(path), lambda: check_budget(path, "icu", 0.1),
                 lambda: charge(path, "icu", 0.1, "x")):
        with pytest.raises(ArtifactError, match=re.escape(where)):
            read()
    assert path.read_bytes() == before  # the refused charge appended nothing
    r = CliRunner().invoke(main, ["budget", "show", str(path)])
    integrity = where.startswith("line 2: not a version-2")  # a broken chain: refuses to spend, exit 3
    assert r.exit_code == (3 if integrity else 1) and where in r.output and "Traceback" not in r.output


def test_duplicated_header_and_broken_sequence_refused(tmp_path):
    path = tmp_path / "l.jsonl"
    head = init_ledger(path, "icu", 1)
    charge(path, "icu", "0.1", "a")
    _append(path, head)
    with pytest.raises(LedgerIntegrityError, match="line 3: its `prev` does not match"):
        ledger_status(path)
    path2 = tmp_path / "m.jsonl"
    init_ledger(path2, "icu", 1)
    charge(path2, "icu", "0.1", "a")
    charge(path2, "icu", "0.1", "b")
    lines = path2.read_text().splitlines()
    path2.write_text("\n".join([lines[0], lines[2]]) + "\n")  # charge #1 removed: sequence 2 after header
    with pytest.raises(LedgerIntegrityError, match="line 2: its `prev` does not match line 1"):
        check_budget(path2, "icu", 0.1)


@pytest.mark.parametrize("total", ["-1", "0", "nan", "1e-400", "abc"])
def test_corrupt_header_total_refused(tmp_path, total):
    path = tmp_path / "l.jsonl"
    head = init_ledger(path, "icu", 1)
    forged = ledger_key.sealed({**head, "rho_total": total}, None)  # re-hashed: the chain alone passes
    path.write_text(json.dumps(forged) + "\n")
    ledger_io.write_head(path, head["ledger_id"], forged, None)
    with pytest.raises(ArtifactError, match="line 1: `rho_total`"):
        ledger_status(path)


def test_negative_charge_cannot_refill_the_budget(tmp_path):
    # the tester's report: a hand-written rho "-10" made `budget show` print spent -5 and let rho 5 through
    path = tmp_path / "l.jsonl"
    init_ledger(path, "icu", 1)
    charge(path, "icu", "0.5", "real")
    _forge(path, _charge_line(2, "-10"))
    r = CliRunner().invoke(main, ["budget", "charge", str(path), "--dataset", "icu", "--rho", "5",
                                  "--description", "x"])
    assert r.exit_code == 1 and "line 3" in r.output and "must be > 0" in r.output
    assert len(path.read_text().splitlines()) == 3


@pytest.mark.parametrize("amount", ["1e-400", "4e-320", "1e400", "inf", "nan", "-1", "0"])
def test_unreadable_amounts_refused_exit_2(tmp_path, amount):
    path = tmp_path / "l.jsonl"
    init_ledger(path, "icu", 1)
    before = path.read_bytes()
    r = CliRunner().invoke(main, ["budget", "charge", str(path), "--dataset", "icu", "--rho", amount,
                                  "--description", "x"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert path.read_bytes() == before
    r = CliRunner().invoke(main, ["budget", "init", str(tmp_path / "n.jsonl"), "--dataset", "icu",
                                  "--rho-total", amount])
    assert r.exit_code == 2 and not (tmp_path / "n.jsonl").exists()
    with pytest.raises(UsageError):
        rho_of_pure_dp("1e-200")  # eps^2/2 = 5e-401 underflows


def test_show_prints_readable_amounts_and_exact_json(tmp_path):
    path = tmp_path / "l.jsonl"
    init_ledger(path, "icu", 1)
    charge(path, "icu", "1e-300", "tiny")
    r = CliRunner().invoke(main, ["budget", "show", str(path)])
    assert r.exit_code == 0
    assert max(len(line) for line in r.output.splitlines()) < 120, r.output
    # remaining rounded down (never more budget than there is), spent exact when short
    assert "remaining ~0.999999\n" in r.output and "rho=1e-300 " in r.output and "spent     1e-300" in r.output
    st = json.loads(CliRunner().invoke(main, ["budget", "show", str(path), "--json"]).output)
    assert Fraction(st["rho_remaining"]) == 1 - Fraction(1, 10 ** 300)  # exact
    assert st["entries"][0]["rho"] == "1e-300"


def test_budget_exceeded_after_a_tiny_charge_prints_short_safe_amounts(tmp_path):
    """A refusal after a 1e-300 charge: no 300-digit exact decimal, remaining rounded down, spent up."""
    path = tmp_path / "l.jsonl"
    init_ledger(path, "icu", 1)
    charge(path, "icu", "1e-300", "tiny")
    charge(path, "icu", "0.1", "a third of something")
    with pytest.raises(BudgetExceededError) as e:
        check_budget(path, "icu", 1)
    msg = str(e.value)
    assert max(len(w) for w in msg.split() if "/" not in w) < 40, msg  # no long number (paths aside)
    assert "rho=1 " in msg and "total 1," in msg
    assert "spent ~0.100001," in msg  # 0.1 + 1e-300 rounded up
    assert "remaining ~0.899999 " in msg  # 0.9 - 1e-300 rounded down
    assert "safe direction" in msg


# ----------------------------------------------------------------------------- hash chain (issue 10 item 5)
def _three_charges(tmp_path):
    path = tmp_path / "chain.jsonl"
    init_ledger(path, "icu", 1)
    for rho, what in (("0.1", "a"), ("0.2", "b"), ("0.3", "c")):
        charge(path, "icu", rho, what)
    return path


def _spend_cli(path, rho="0.01"):
    return CliRunner().invoke(main, ["budget", "charge", str(path), "--dataset", "icu", "--rho", rho,
                                     "--description", "x"])


def _edit(path, fn):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(fn(lines)) + "\n")


@pytest.mark.parametrize("edit,line,needle", [
    (lambda ls: ls[:-1], 3, "the last line(s) were deleted"),
    (lambda ls: ls[:-2], 2, "the last line(s) were deleted"),
    (lambda ls: [ls[0], ls[1], ls[2].replace('"rho": "0.2"', '"rho": "0.02"'), ls[3]], 3, "digest does not match"),
    (lambda ls: [ls[0], ls[1], ls[3]], 3, "`prev` does not match line 2"),
    (lambda ls: [ls[0], ls[2], ls[1], ls[3]], 2, "`prev` does not match line 1"),
])
def test_edited_or_truncated_ledger_refuses_to_spend_exit_3(tmp_path, edit, line, needle):
    """Each edit lowers the spent budget; on the old (unchained) format each was accepted."""
    path = _three_charges(tmp_path)
    _edit(path, edit)
    before = path.read_bytes()
    for read in (lambda: ledger_status(path), lambda: check_budget(path, "icu", 0.1),
                 lambda: charge(path, "icu", 0.1, "x")):
        with pytest.raises(LedgerIntegrityError, match=re.escape(f"line {line}: ") + ".*" + re.escape(needle)):
            read()
    r = _spend_cli(path)
    assert r.exit_code == 3 and f"line {line}" in r.output and "Traceback" not in r.output, r.output
    assert path.read_bytes() == before


def test_missing_or_edited_head_refused(tmp_path):
    path = _three_charges(tmp_path)
    head = path.with_name(path.name + ".head")
    text = head.read_text()
    head.write_text(text.replace('"seq": 3', '"seq": 2'))  # moved back by hand: its own digest breaks
    with pytest.raises(LedgerIntegrityError, match="head file .* was edited"):
        check_budget(path, "icu", 0.1)
    head.unlink()
    with pytest.raises(LedgerIntegrityError, match="head file .* is missing"):
        check_budget(path, "icu", 0.1)


def test_crash_between_append_and_head_is_accepted_and_repaired(tmp_path):
    """A ledger one charge ahead of its head only spent more: accepted; the next charge moves the head."""
    path = _three_charges(tmp_path)
    head = path.with_name(path.name + ".head")
    old_head = head.read_text()
    charge(path, "icu", "0.1", "d")
    head.write_text(old_head)
    assert ledger_status(path)["rho_spent"] == "0.7"
    charge(path, "icu", "0.1", "e")
    assert json.loads(head.read_text())["seq"] == 5


def reseal(path, entries, key):
    """Write ``entries`` as a ledger chained and sealed under ``key`` (None: SHA-256), with its head:
    what whoever can write the folder does after an edit (with or without the key)."""
    prev, out = None, []
    for e in entries:
        e = ledger_key.sealed({**e, "prev": prev}, key)
        out.append(e)
        prev = e["digest"]
    path.write_text("".join(json.dumps(e) + "\n" for e in out))
    ledger_io.write_head(path, out[0]["ledger_id"], out[-1], key)


def test_keyless_chain_does_not_stop_a_full_rehash_but_a_key_does(tmp_path, monkeypatch):
    """What is and is not detected (module docstring): without a key a re-hashed edit passes."""
    def rehash(path, key):
        entries = [json.loads(x) for x in path.read_text().splitlines()]
        entries[2]["rho"] = "0.02"
        reseal(path, entries, key)

    plain = _three_charges(tmp_path)
    rehash(plain, None)
    assert ledger_status(plain)["rho_spent"] == "0.42"  # not detected: documented limitation
    keydir = tmp_path / "keys"
    keydir.mkdir()
    (keydir / "ledger.key").write_bytes(b"0123456789abcdef0123456789abcdef\n")
    monkeypatch.setenv("PRIVAUDIT_LEDGER_KEY_FILE", str(keydir / "ledger.key"))
    ledir = tmp_path / "keyed"
    ledir.mkdir()
    keyed = _three_charges(ledir)
    assert json.loads(keyed.read_text().splitlines()[0])["auth"] == "hmac-sha256"
    assert "0123456789abcdef" not in keyed.read_text()
    assert ledger_status(keyed)["rho_spent"] == "0.6"
    rehash(keyed, None)  # the editor does not have the key
    with pytest.raises(LedgerIntegrityError, match="line 1: its digest does not match"):
        check_budget(keyed, "icu", 0.1)
    monkeypatch.delenv("PRIVAUDIT_LEDGER_KEY_FILE")
    with pytest.raises(UsageError, match="authenticated"):
        ledger_status(keyed)
    monkeypatch.setenv("PRIVAUDIT_LEDGER_KEY", "another key of 16+ bytes")
    with pytest.raises(UsageError, match="not this ledger's key"):
        ledger_status(keyed)
    monkeypatch.delenv("PRIVAUDIT_LEDGER_KEY")
    (ledir / "k").write_bytes(b"0123456789abcdef0123")
    monkeypatch.setenv("PRIVAUDIT_LEDGER_KEY_FILE", str(ledir / "k"))
    with pytest.raises(UsageError, match="own folder"):
        init_ledger(ledir / "new.jsonl", "icu", 1)


def _v1_ledger(path):
    path.write_text("".join(json.dumps(e) + "\n" for e in [
        {"format": "privaudit-ledger", "format_version": 1, "type": "init", "dataset_id": "icu",
         "rho_total": "1", "created": "2025-01-01T00:00:00Z"},
        _charge_line(1, "0.25")]))


def test_version_1_ledger_read_refused_for_spending_then_upgraded(tmp_path):
    path = tmp_path / "old.jsonl"
    _v1_ledger(path)
    st = ledger_status(path)
    assert st["format_version"] == 1 and st["verified"] is False and st["rho_spent"] == "0.25"
    with pytest.raises(ArtifactError, match="format_version 1 has no hash chain.*budget upgrade"):
        check_budget(path, "icu", 0.1)
    r = _spend_cli(path)
    assert r.exit_code == 1 and "format_version 1" in r.output
    r = CliRunner().invoke(main, ["budget", "upgrade", str(path)])
    assert r.exit_code == 0, r.output
    st = ledger_status(path)
    assert st["format_version"] == 2 and st["verified"] and st["rho_spent"] == "0.25"
    assert (tmp_path / "old.jsonl.v1").exists()
    charge(path, "icu", "0.5", "after upgrade")
    assert ledger_status(path)["rho_remaining"] == "0.25"


def test_entries_validate_against_the_ledger_schema(tmp_path):
    path = _three_charges(tmp_path)
    charge(path, "icu", "0.1", "named", run="run-1", output=tmp_path / "out")
    for line in path.read_text().splitlines():
        assert schema_errors(json.loads(line), "ledger_entry") == []
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["run"] == "run-1" and last["output"] == str(tmp_path / "out")
    assert schema_errors({**last, "extra": 1}, "ledger_entry")
