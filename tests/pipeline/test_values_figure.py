"""Issue 13 item 9 (values plot): dots on a zoomed axis that says so, the clinicians and the optimum marked,
the imitation-fallback share on each learned policy; and (follow-up) the certified values and the clinicians'
DP estimate with its interval next to them."""

from __future__ import annotations

import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.patches import Rectangle

from privaudit.pipeline.figures import plot_values, values_figure

EVAL = {"values": {"dp-apvi": 0.6928}, "references": {"clinicians": 0.6920, "uniform": 0.6854},
        "optimal_value": 0.7922, "mdp": "icu-sepsis", "horizon": 20}


def test_values_figure_reads_on_its_own(tmp_path):
    fig = values_figure(EVAL, fallback={"dp-apvi": 1.0})
    ax = fig.axes[1]  # the zoomed panel (the left one spans every mark)
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert bars == []  # no bars on an axis that does not start at 0
    lo, hi = ax.get_xlim()
    assert lo > 0 and "not from 0" in ax.get_xlabel()
    assert lo < 0.6854 and hi > 0.7922  # every value and both marks inside
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("optimum" in t and "0.7922" in t for t in legend)
    assert any("clinicians" in t and "0.6920" in t for t in legend)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]  # the rows' names, on the left panel
    assert any("imitation fallback at 100%" in t for t in labels)
    assert not any(t.startswith("clinicians") for t in labels)  # a line, not a second dot
    plt.close(fig)
    assert plot_values(EVAL, tmp_path / "v.png").stat().st_size > 0


CERT = {"dp-apvi": 0.0, "dp-pbb": 0.05}
BEHAVIOUR = {"estimate": 0.6970, "interval": [0.6906, 0.7034], "confidence": 0.95}
EVAL2 = {**EVAL, "values": {"dp-pbb": 0.7067, "dp-apvi": 0.6928}}


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_certificates_and_the_clinicians_dp_estimate_are_drawn_next_to_the_values():
    """Follow-up of issue 13: the figure shows each policy's certified value (a lower bound, on the whole
    declared return range, joined to its exact value) and the clinicians' DP estimate with its interval."""
    fig = values_figure(EVAL2, certified=CERT, behaviour=BEHAVIOUR, return_range=(0.0, 1.0))
    full, zoom = fig.axes[:2]
    assert full.get_xlim()[0] <= 0.0 and full.get_xlim()[1] >= 1.0  # the declared return range
    assert "cert 0.0000" in _texts(full) and "cert 0.0500" in _texts(full)
    assert any("0.6970 [0.6906, 0.7034]" in t for t in _texts(full))
    # the interval is an error bar from 0.6906 to 0.7034 on the clinicians' row
    labels = [t.get_text() for t in full.get_yticklabels()]
    row = len(labels) - 1 - next(i for i, t in enumerate(labels) if t.startswith("clinicians"))
    segs = [seg for coll in full.collections for seg in getattr(coll, "get_segments", lambda: [])()]
    assert any(np.allclose(seg[:, 0], [0.6906, 0.7034]) and np.allclose(seg[:, 1], row) for seg in segs)
    # the zoom keeps the values and the interval; certificates outside it are named at its left edge
    lo, hi = zoom.get_xlim()
    assert 0.05 < lo < 0.6906 and hi > 0.7922
    assert "◀ cert 0.0000" in _texts(zoom) and "◀ cert 0.0500" in _texts(zoom)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("certified value" in t for t in legend) and any("estimated with DP" in t for t in legend)
    plt.close(fig)


def test_without_an_mdp_the_figure_shows_certificates_and_the_estimate_only(tmp_path):
    fig = values_figure(None, certified={"dp-apvi": -1.0}, behaviour={**BEHAVIOUR, "estimate": 0.5077,
                                                                       "interval": [0.4963, 0.5190]},
                        return_range=(-1.0, 1.0))
    assert len(fig.axes) == 1 and "cert -1.0000" in _texts(fig.axes[0])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any("exact value" in t or "optimum" in t for t in legend)
    plt.close(fig)
    with pytest.raises(ValueError, match="nothing to draw"):
        values_figure(None, certified={"dp-apvi": None})


def test_figure_module_keeps_matplotlib_out_of_imports():
    code = ("import sys; import privaudit.pipeline.figures, privaudit.pipeline.report, privaudit.pipeline.run, "
            "privaudit.pipeline.render, privaudit.pipeline.stages, privaudit.pipeline.config; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
