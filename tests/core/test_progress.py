"""Issue 13 item 6: the long loops show a progress bar on stderr when asked (the CLI: on a terminal)."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from privaudit.cli import main
from privaudit.learners.tabular.train import train_from_release
from privaudit.mdp.random_tabular import random_tabular_mdp
from privaudit.mdp.simulate import simulate, write_logs
from privaudit.core.progress import progress_enabled
from privaudit.core.spec import load_spec
from privaudit.release.tabular import release_logs
from tests._release_logs import spec_doc

H, S, A = 4, 5, 2


def _files(tmp_path):
    write_logs(simulate(random_tabular_mdp(S, A, H, 0), np.full((S, A), 0.5), 50, np.random.default_rng(1)),
               tmp_path / "logs.parquet")
    (tmp_path / "spec.json").write_text(json.dumps(spec_doc(H=H, S=S, A=A, terminals=())))
    return tmp_path / "logs.parquet", load_spec(tmp_path / "spec.json")


def test_release_and_training_show_bars_when_enabled(tmp_path, capsys):
    logs, spec = _files(tmp_path)
    with progress_enabled(True):
        release_logs(logs, spec, rho=1.0, out=tmp_path / "r", seed=1)
        err = capsys.readouterr().err
        assert "release: noisy transition slices" in err and f"/{H} " in err
        train_from_release(tmp_path / "r", spec=spec)
        err = capsys.readouterr().err
        assert "backward pass" in err and f"/{H} " in err
    out = capsys.readouterr()
    assert out.out == ""  # bars never touch stdout (--json stays clean)


def test_no_bars_by_default_in_the_library_nor_off_a_terminal(tmp_path, capsys):
    logs, spec = _files(tmp_path)
    release_logs(logs, spec, rho=1.0, out=tmp_path / "r", seed=1)
    assert "transition slices" not in capsys.readouterr().err
    res = CliRunner().invoke(main, ["train", "--release", str(tmp_path / "r"), "--algo", "dp-apvi",
                                    "--out", str(tmp_path / "p")])
    assert res.exit_code == 0 and "backward pass" not in res.output  # CliRunner's stderr is not a terminal
