"""Issue 29 item 1: the ledger key cannot be bypassed; the reader's settings, not the file, decide.

Before, `privacy/ledger.py` chose how to verify a ledger from the ledger's own `auth` field: whoever could
write the folder (without the key) could rewrite an `hmac-sha256` ledger as `auth: sha256` with fewer
charges, or delete it and `init` an unkeyed one, and a reader with the key set accepted both (the issue
measured 1.5 spent of a total of 1 accepted).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.privacy import ledger_key
from privaudit.privacy.ledger import init_ledger, ledger_status
from tests._release_logs import random_log, write_spec
from tests.privacy.test_ledger import reseal

H, S, A = 3, 4, 2
KEY = b"0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Logs and spec of dataset 'icu', and a key file in its own folder."""
    d = tmp_path_factory.mktemp("keyed")
    random_log(np.random.default_rng(0), 40, H=H, S=S, A=A).write_parquet(d / "logs.parquet")
    write_spec(d, H=H, S=S, A=A, terminals=(), dataset_id="icu")
    (d / "keys").mkdir()
    (d / "keys" / "ledger.key").write_bytes(KEY)
    return d


@pytest.fixture
def keyed(files, tmp_path, monkeypatch):
    """A ledger keyed with KEY (total 1, spent 0.9), the key set in the environment as its owner has it."""
    monkeypatch.setenv(ledger_key.KEY_FILE_ENV, str(files / "keys" / "ledger.key"))
    path = tmp_path / "icu.ledger"
    assert _cli("budget", "init", path, "--dataset", "icu", "--rho-total", "1").exit_code == 0
    for rho in ("0.5", "0.4"):
        assert _cli("budget", "charge", path, "--dataset", "icu", "--rho", rho, "--description", "r").exit_code == 0
    return path


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _release(files, out, ledger, rho="0.5"):
    return _cli("release", files / "logs.parquet", "--spec", files / "spec.json", "--rho", rho, "--out", out,
                "--seed", "1", "--ledger", ledger)


def _rewrite_unkeyed(path, keep: int):
    """The attack without the key: keep the first ``keep`` charges, declare `auth: sha256`, re-hash everything."""
    entries = [json.loads(x) for x in path.read_text().splitlines()][:1 + keep]
    reseal(path, [{**entries[0], "auth": "sha256", "key_id": None}] + entries[1:], None)


def _assert_refused_unkeyed(res, path):
    assert res.exit_code == 3, res.output
    line = res.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(f"error: {path}: a ledger key is set") and "this ledger is not keyed" in line


def test_ledger_rewritten_as_sha256_without_the_key_is_refused_by_a_keyed_reader(files, keyed, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.delenv(ledger_key.KEY_FILE_ENV)  # the attacker has no key
    _rewrite_unkeyed(keyed, keep=0)
    assert ledger_status(keyed)["rho_spent"] == "0"  # self-consistent: a keyless reader cannot tell
    forged = keyed.read_bytes()
    monkeypatch.setenv(ledger_key.KEY_FILE_ENV, str(files / "keys" / "ledger.key"))
    _assert_refused_unkeyed(_cli("budget", "show", keyed), keyed)
    _assert_refused_unkeyed(_cli("budget", "charge", keyed, "--dataset", "icu", "--rho", "0.6", "--description", "x"),
                            keyed)
    res = _release(files, tmp_path / "rel", keyed)
    _assert_refused_unkeyed(res, keyed)
    assert not (tmp_path / "rel").exists() and keyed.read_bytes() == forged  # nothing written, nothing charged


def test_ledger_deleted_and_re_created_without_the_key_is_refused(files, keyed, tmp_path, monkeypatch):
    head = keyed.with_name(keyed.name + ".head")
    monkeypatch.delenv(ledger_key.KEY_FILE_ENV)
    keyed.unlink()  # the naive attack: the ledger only; `init` refuses while the old head is there
    res = _cli("budget", "init", keyed, "--dataset", "icu", "--rho-total", "10")
    assert res.exit_code == 2 and f"{head} exists, the head file of an earlier ledger" in res.output, res.output
    assert not keyed.exists()
    head.unlink()  # both files: `init` now makes an unkeyed ledger with any total
    assert _cli("budget", "init", keyed, "--dataset", "icu", "--rho-total", "10").exit_code == 0
    monkeypatch.setenv(ledger_key.KEY_FILE_ENV, str(files / "keys" / "ledger.key"))
    _assert_refused_unkeyed(_release(files, tmp_path / "rel", keyed), keyed)
    assert not (tmp_path / "rel").exists()  # nothing released
    monkeypatch.delenv(ledger_key.KEY_FILE_ENV)
    assert ledger_status(keyed)["n_entries"] == 0  # and nothing charged


def test_a_pinned_ledger_id_refuses_a_ledger_re_created_even_with_the_key(files, keyed, tmp_path, monkeypatch):
    r = _cli("budget", "show", keyed)
    assert r.exit_code == 0 and "key id" in r.output, r.output
    ledger_id = ledger_status(keyed)["ledger_id"]
    assert f"ledger id {ledger_id}" in r.output
    monkeypatch.setenv(ledger_key.LEDGER_ID_ENV, ledger_id)
    assert _cli("budget", "charge", keyed, "--dataset", "icu", "--rho", "0.05", "--description", "ok").exit_code == 0
    keyed.unlink()
    keyed.with_name(keyed.name + ".head").unlink()
    init_ledger(keyed, "icu", 10)  # by someone holding the key: keyed, with a fresh ledger id
    res = _release(files, tmp_path / "rel", keyed)
    assert res.exit_code == 3 and "this ledger's id is" in res.output and ledger_id in res.output, res.output
    assert not (tmp_path / "rel").exists()


def test_an_unkeyed_ledger_reads_without_a_key_and_is_sealed_by_upgrade(files, tmp_path, monkeypatch):
    """Old ledgers still read (no key set); with a key set, `budget upgrade` puts one under it, on purpose."""
    path = tmp_path / "plain.ledger"
    init_ledger(path, "icu", 1)
    assert _cli("budget", "charge", path, "--dataset", "icu", "--rho", "0.25", "--description", "a").exit_code == 0
    r = _cli("budget", "upgrade", path)
    assert r.exit_code == 2 and "nothing to upgrade" in r.output
    monkeypatch.setenv(ledger_key.KEY_FILE_ENV, str(files / "keys" / "ledger.key"))
    _assert_refused_unkeyed(_cli("budget", "show", path), path)
    r = _cli("budget", "upgrade", path)
    assert r.exit_code == 0 and "hmac-sha256" in r.output and f"{path}.unkeyed" in r.output, r.output
    st = ledger_status(path)
    assert st["auth"] == "hmac-sha256" and st["key_id"] == ledger_key.key_id(KEY) and st["rho_spent"] == "0.25"
    assert _cli("budget", "charge", path, "--dataset", "icu", "--rho", "0.75", "--description", "b").exit_code == 0


def test_wrong_dataset_names_the_spec_field_and_a_spent_budget_is_called_spent(files, tmp_path):
    """Fresh-user findings: the mismatch did not mention the spec's dataset_id; a spent budget advised
    "use a new dataset budget" for the same data."""
    other = tmp_path / "other.ledger"
    init_ledger(other, "ward-7", 1)
    res = _release(files, tmp_path / "rel", other)
    assert res.exit_code == 2 and "this ledger is for dataset 'ward-7', not for 'icu'" in res.output, res.output
    assert "the dataset_id of the spec given" in res.output
    led = tmp_path / "icu.ledger"
    init_ledger(led, "icu", "0.5")
    assert _release(files, tmp_path / "r1", led).exit_code == 0
    res = _release(files, tmp_path / "r2", led, rho="0.1")
    assert res.exit_code == 3, res.output
    assert "The budget of dataset 'icu' is spent: nothing more may be released from this data" in res.output
    assert "new dataset budget" not in res.output and not (tmp_path / "r2").exists()
