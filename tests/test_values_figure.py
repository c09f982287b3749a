"""Issue 13 item 9 (values plot): dots on a zoomed axis that says so, the clinicians and the optimum marked,
the imitation-fallback share on each learned policy."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from privaudit.pipeline.report import plot_values, values_figure

EVAL = {"values": {"dp-apvi": 0.6928}, "references": {"clinicians": 0.6920, "uniform": 0.6854},
        "optimal_value": 0.7922, "mdp": "icu-sepsis", "horizon": 20}


def test_values_figure_reads_on_its_own(tmp_path):
    fig = values_figure(EVAL, fallback={"dp-apvi": 1.0})
    ax = fig.axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert bars == []  # no bars on an axis that does not start at 0
    lo, hi = ax.get_xlim()
    assert lo > 0 and "not from 0" in ax.get_xlabel()
    assert lo < 0.6854 and hi > 0.7922  # every value and both marks inside
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("optimum" in t and "0.7922" in t for t in legend)
    assert any("clinicians" in t and "0.6920" in t for t in legend)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert any("imitation fallback at 100%" in t for t in labels)
    assert not any(t.startswith("clinicians") for t in labels)  # a line, not a second dot
    plt.close(fig)
    assert plot_values(EVAL, tmp_path / "v.png").stat().st_size > 0
