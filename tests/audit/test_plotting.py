"""The audit figure shows the claim, the deciding test's curve and the certified point, readably.

Reads the drawn artists back (not pixels): the claim's line and the certified point of the log-log
panel must put a violation inside the forbidden band and a correct mechanism outside it; axes start
at 0 (linear) and reach below the claim's line (log); the headline curve is the deciding test's.
Fixed seeds; the verdicts are those of tests/audit/mechanisms/test_catalogue.py at these sizes.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from privaudit.audit import AuditSettings, Claim, run_audit  # noqa: E402
from privaudit.audit.mechanisms.catalogue import CatalogueMechanism  # noqa: E402
from privaudit.audit.plotting import trade_off_figure  # noqa: E402
from tests.audit.helpers import tiny_logs, tiny_spec  # noqa: E402


def _axes(fig):
    return {a.get_label(): a for a in fig.axes if a.get_label() in ("tradeoff", "roc")}


def _line(ax, gid):
    (line,) = [ln for ln in ax.get_lines() if ln.get_gid() == gid]
    return line


@pytest.mark.parametrize("name,kind,violation", [("no_noise", "generic", True), ("gaussian", "generic", False),
                                                 ("gaussian_small_noise", "gaussian", True),
                                                 ("gaussian", "gaussian", False)])
def test_certified_point_sits_in_the_forbidden_band_exactly_for_a_violation(name, kind, violation):
    spec, logs = tiny_spec(), tiny_logs()
    m = CatalogueMechanism(name, spec)
    claim = Claim.from_rho(0.5, 1e-5, kind=kind)
    r = run_audit(m, logs, spec, claim=claim, trials=4000, seed=2, settings=AuditSettings(graybox=False), progress=False)
    assert r.violation == violation
    fig = trade_off_figure(r.data, r.verdict, r.epsilon_lower_bound)
    try:
        ax = _axes(fig)
        assert ax["tradeoff"].get_xlim()[0] == 0 and ax["tradeoff"].get_ylim()[0] == 0
        (cx,), (cy,) = _line(ax["roc"], "certified").get_data()
        bx, by = _line(ax["roc"], "claim").get_data()
        above = cy > np.interp(np.log(cx), np.log(bx), by)
        assert above == violation
        # the claim is readable: at the left edge of the log panel its line is far below TPR = 1
        assert by[0] < 0.5 and ax["roc"].get_xlim()[0] <= cx
        proved = [ln.get_gid() for ln in ax["roc"].get_lines() if str(ln.get_gid()).startswith("proved")]
        assert proved == [f"proved by the {'GDP' if kind == 'gaussian' else 'generic'} test: "
                          + (f"mu >= {r.data['method']['gaussian']['mu_lower_bound']:.3g}" if kind == "gaussian"
                             else f"eps >= {r.epsilon_lower_bound:.3g} at delta 1e-05")]
    finally:
        plt.close(fig)
