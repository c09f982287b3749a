"""A read-only command whose stdout is closed early (`| head -1`) exits quietly, never claiming a write error."""

import subprocess
import sys


def test_budget_show_into_a_closed_pipe_is_quiet(tmp_path):
    led = tmp_path / "led.jsonl"
    cmd = [sys.executable, "-c", "from privaudit.cli import main; main()"]
    assert subprocess.run([*cmd, "budget", "init", str(led), "--dataset", "d", "--rho-total", "2"],
                          capture_output=True).returncode == 0
    # a reader that closes at once: the JSON output is larger than nothing, so the write hits a closed pipe
    p = subprocess.Popen([*cmd, "budget", "show", str(led), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read()
    p.wait(timeout=60)
    assert p.returncode in (0, 141) and b"nothing was written" not in err and b"Broken pipe" not in err, err


def test_budget_init_refuses_a_missing_folder(tmp_path):
    """A typo in the folder must not silently create a second, fresh ledger."""
    from click.testing import CliRunner
    from privaudit.cli import main
    led = tmp_path / "nonexistent" / "dir" / "b.jsonl"
    res = CliRunner().invoke(main, ["budget", "init", str(led), "--dataset", "d", "--rho-total", "2"])
    assert res.exit_code == 2 and "does not exist" in res.output
    assert not (tmp_path / "nonexistent").exists()
