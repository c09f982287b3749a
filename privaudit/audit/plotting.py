"""The audit's trade-off figure (``privaudit audit --plot``, :meth:`AuditReport.plot`).

Two panels of the same evidence, so that a claim is readable whatever its
size:

* left, the hypothesis-testing trade-off (FPR, FNR) on linear axes from 0
  (Dong-Roth-Su 2019): the region the claim forbids shaded, the chosen
  score's empirical curve on the evaluation runs, the observed point, the
  certified corner (FPR upper bound, FNR upper bound: the confidence box),
  and the curve of the test that gave the headline bound (the (eps_lb,
  delta) boundary for the generic test, the mu_lb-GDP curve for the GDP
  opt-in) through it;
* right, the same as an ROC on log-log axes (TPR = 1 - FNR against FPR),
  where an (eps, delta) claim is the line TPR = e^eps FPR + delta, eps
  above the diagonal in natural-log units: a claim such as (7.77, 1e-6),
  an invisible sliver along the axes of the left panel, is a band here, and
  the certified point's height above the diagonal is the generic eps_lb.

A violation is a certified point inside the shaded region. Points are drawn
with distinct markers (hollow: observed; filled: certified) and joined by
the confidence box, so they stay apart when they nearly coincide; observed
rates of 0 (perfect separation) cannot sit on a log axis and are pinned to
its edge with an arrow marker.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from privaudit.audit import bounds as B
from privaudit.core.atomic import atomic_path
from privaudit.core.outputs import MARK_KEY

#: The mark of an audit plot (``privaudit.core.outputs.png_mark``): what ``audit --overwrite`` may replace.
AUDIT_PLOT_MARK = "audit-plot"

_FORBID = "tab:red"
_PROVED = "tab:blue"
_CURVE = "0.55"


def _allowed_fnr(a, claim: dict, test: str):
    """Smallest FNR the claim allows at FPR ``a``, for the test that decides it."""
    if test == "gaussian" and claim.get("mu"):
        return B.tradeoff_gdp(a, claim["mu"])
    return B.tradeoff_eps_delta(a, claim["epsilon"], claim["delta"])


def _headline(data: dict, event: dict | None, test: str):
    """(label, fnr(a)) of the curve the headline bound proves, or None."""
    if event is None:
        return None
    delta = data["claim"]["delta"]
    if test == "gaussian":
        mu = data["method"]["gaussian"]["mu_lower_bound"]
        return (f"proved by the GDP test: mu >= {mu:.3g}", lambda a: B.tradeoff_gdp(a, mu))
    eps = event["epsilon_lower_bound"]
    return (f"proved by the generic test: eps >= {eps:.3g} at delta {delta:.2g}",
            lambda a: B.tradeoff_eps_delta(a, eps, delta))


def _claim_label(claim: dict, test: str) -> str:
    if test == "gaussian" and claim.get("mu"):
        return f"forbidden by the claim: {claim['mu']:.3g}-GDP (eps {claim['epsilon']:.3g} at delta {claim['delta']:.2g})"
    if claim.get("rho") is not None:
        return (f"forbidden by the claim: rho = {claim['rho']:.3g} read as ({claim['epsilon']:.3g}, "
                f"{claim['delta']:.2g})-DP")
    return f"forbidden by the claim: ({claim['epsilon']:.3g}, {claim['delta']:.2g})-DP"


def _zoom(ax, ev: dict, claim: dict, test: str, head) -> None:
    """Inset (upper right, where no trade-off curve passes) magnifying the confidence box, so the
    observed point, the certified corner and the two curves stay apart however close they are."""
    w = max(ev["fpr_upper"] - ev["fpr"], ev["fnr_upper"] - ev["fnr"], 2e-3)
    x0, x1 = max(ev["fpr"] - 2 * w, -0.4 * w), min(ev["fpr_upper"] + 2 * w, 1.0)  # a rate of 0 stays in view
    y0, y1 = max(ev["fnr"] - 2 * w, -0.4 * w), min(ev["fnr_upper"] + 2 * w, 1.0)
    if x1 - x0 > 0.3 and y1 - y0 > 0.3:  # already legible at full scale
        return
    ins = ax.inset_axes([0.5, 0.46, 0.46, 0.46])
    a = np.linspace(max(x0, 0.0), x1, 400)
    bnd = _allowed_fnr(a, claim, test)
    ins.fill_between(a, min(y0, float(bnd.min())), bnd, color=_FORBID, alpha=0.18, lw=0)
    ins.plot(a, bnd, color=_FORBID, lw=1.4)
    if head:
        ins.plot(a, head[1](a), color=_PROVED, lw=1.2, ls="--")
    roc = np.asarray(ev["roc"], dtype=float)
    ins.plot(roc[:, 0], roc[:, 1], color=_CURVE, lw=1.0)
    ins.plot([ev["fpr"], ev["fpr_upper"], ev["fpr_upper"]], [ev["fnr"], ev["fnr"], ev["fnr_upper"]],
             color=_PROVED, lw=0.9, ls=":")
    ins.plot([ev["fpr"]], [ev["fnr"]], "o", mfc="white", mec="black", ms=7, zorder=5)
    ins.plot([ev["fpr_upper"]], [ev["fnr_upper"]], "D", color=_PROVED, ms=6, zorder=6)
    ins.set_xlim(x0, x1)
    ins.set_ylim(y0, y1)
    ins.tick_params(labelsize=6)
    ins.text(0.03, 0.95, "zoom on the event", transform=ins.transAxes, fontsize=7, va="top")
    ax.indicate_inset_zoom(ins, edgecolor="0.4")


#: decade labels of the log-log panel in plain text (10⁻⁴): matplotlib's default ($10^{-4}$) goes
#: through mathtext, whose parser costs about 0.1 s of CPU to build in every run that plots
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _decade_label(x: float, pos=None) -> str:
    """'10⁻⁴' for 1e-4 (log-axis major ticks sit on decades)."""
    return "10" + str(int(round(math.log10(x)))).translate(_SUPERSCRIPT)


def _log_grid(ax, lo: float) -> None:
    """Decade ticks labelled in plain text, major grid lines, and the minor grid (2..9 x 10^k) drawn as two
    line collections without minor ticks.

    The same lines as ``ax.grid(which="both")`` minus the small minor tick marks: matplotlib builds a
    Tick (two marks, two labels, a grid line) per minor tick, about 60 here, a third of the figure's
    drawing time (issue 19). Call after the limits are set: [lo, 1] x [lo, 2].
    """
    from matplotlib import rcParams
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10.0))
        axis.set_major_formatter(FuncFormatter(_decade_label))
        axis.set_minor_locator(NullLocator())
    ax.grid(alpha=0.25, which="major", lw=0.4)
    minor = [k * 10.0 ** e for e in range(int(math.floor(math.log10(lo))), 1) for k in range(2, 10)]
    kw = dict(colors=rcParams["grid.color"], alpha=0.25, lw=0.4, zorder=1.5)  # where grid lines sit
    ax.vlines([m for m in minor if lo < m < 1.0], lo, 2.0, **kw)
    ax.hlines([m for m in minor if lo < m < 2.0], lo, 1.0, **kw)


def plot_report(data: dict, verdict: str, epsilon_lower_bound, path: str | Path) -> Path:
    """Write the two-panel trade-off PNG of an audit report document (:func:`trade_off_figure`).

    Parameters
    ----------
    data : dict
        The report document (``AuditReport.data``; schema ``audit_report``).
    verdict : str
        ``violation`` or ``no violation found``.
    epsilon_lower_bound : float or None
        The headline bound (None for a gray-box-only finding).
    path : str or Path
        The PNG, written atomically.

    Returns
    -------
    Path
    """
    fig = trade_off_figure(data, verdict, epsilon_lower_bound)
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format="png", dpi=110, metadata={MARK_KEY: AUDIT_PLOT_MARK})  # --overwrite knows it
    return Path(path)


def trade_off_figure(data: dict, verdict: str, epsilon_lower_bound):
    """The figure of :func:`plot_report` (matplotlib Figure; axes labelled ``tradeoff``, ``roc``).

    Parameters are those of :func:`plot_report` without the path.

    Notes
    -----
    A bare ``matplotlib.figure.Figure`` (no pyplot: no backend or figure
    manager to import, nothing to close) with fixed margins instead of
    ``tight_layout`` (which draws the figure once more to measure it): the
    figure costs about a third of the CPU it did in every audit and pipeline
    run.
    """
    from matplotlib.figure import Figure

    claim = data["claim"]
    method = data.get("method", {})
    test = method.get("test", "generic")
    events = data.get("events") or []
    ev = events[0] if events else None
    n_ev = max(int(data.get("evaluation_trials") or 0), 1)
    head = _headline(data, ev, test)

    fig = Figure(figsize=(12, 5.6))
    ax, lx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.15]})
    # ------------------------------------------------------------------ left: linear trade-off
    a = np.concatenate([np.geomspace(1e-12, 1e-3, 400), np.linspace(1e-3, 1, 1200)])
    a = np.concatenate([[0.0], a])
    bnd = _allowed_fnr(a, claim, test)
    ax.fill_between(a, 0, bnd, color=_FORBID, alpha=0.18, lw=0, label=_claim_label(claim, test))
    ax.plot(a, bnd, color=_FORBID, lw=1.6)
    if head:
        ax.plot(a, head[1](a), color=_PROVED, lw=1.4, ls="--", label=head[0])
    if ev is not None:
        roc = np.asarray(ev["roc"], dtype=float)
        ax.plot(roc[:, 0], roc[:, 1], color=_CURVE, lw=1.0, label=f"empirical curve of {ev['candidate']} "
                f"(evaluation runs)")
        ax.plot([ev["fpr"], ev["fpr_upper"], ev["fpr_upper"]], [ev["fnr"], ev["fnr"], ev["fnr_upper"]],
                color=_PROVED, lw=0.9, ls=":")
        ax.plot([ev["fpr"]], [ev["fnr"]], "o", mfc="white", mec="black", ms=7, zorder=5,
                label=f"observed event: {ev['event']} ({ev['direction']})")
        ax.plot([ev["fpr_upper"]], [ev["fnr_upper"]], "D", color=_PROVED, ms=6, zorder=6,
                label="certified corner (FPR, FNR upper bounds)")
    if ev is not None:
        _zoom(ax, ev, claim, test, head)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("false positive rate (type I error)")
    ax.set_ylabel("false negative rate (type II error)")
    ax.set_title("trade-off, linear axes", fontsize=9, y=1.0)
    ax.grid(alpha=0.25)

    # ------------------------------------------------------------------ right: log-log ROC
    # axis floor: below the smallest visible rate (about 1/n), else (gray-box: no runs) below the claim's line
    lo = 0.3 / n_ev if data.get("evaluation_trials") else min(1e-2, 0.1 * float(np.exp(-claim["epsilon"])))
    if ev is None:
        for axis in (ax, lx):
            axis.text(0.5, 0.5, "no trials ran: the gray-box check decided", transform=axis.transAxes,
                      ha="center", fontsize=9, color=_FORBID)
    if ev is not None:
        lo = min(lo, 0.3 * max(ev["fpr_upper"], 1e-12))
    lo = max(10 ** np.floor(np.log10(lo)), 1e-12)
    x = np.geomspace(lo, 1, 600)
    allowed_tpr = 1 - _allowed_fnr(x, claim, test)
    lx.fill_between(x, np.clip(allowed_tpr, lo, 1), 1, color=_FORBID, alpha=0.18, lw=0)
    lx.plot(x, np.clip(allowed_tpr, lo, 1), color=_FORBID, lw=1.6, gid="claim")
    lx.plot(x, x, color="0.3", lw=0.8, ls="-.", label="no information (TPR = FPR)")
    if head:
        lx.plot(x, np.clip(1 - head[1](x), lo, 1), color=_PROVED, lw=1.4, ls="--", gid=head[0])
    if ev is not None:
        roc = np.asarray(ev["roc"], dtype=float)
        keep = roc[:, 0] > 0
        lx.plot(roc[keep, 0], np.clip(1 - roc[keep, 1], lo, 1), color=_CURVE, lw=1.0)
        pinned = ev["fpr"] <= lo  # FPR 0 (or below the axis): pinned just inside the left edge
        fx, ty = (1.6 * lo if pinned else ev["fpr"]), max(1 - ev["fnr"], lo)
        cx, cy = ev["fpr_upper"], max(ev["tpr_lower"], lo)
        lx.plot([fx, cx, cx], [ty, ty, cy], color=_PROVED, lw=0.9, ls=":")
        lx.plot([fx], [ty], "<" if pinned else "o", mfc="white", mec="black", ms=7, zorder=5)
        lx.plot([cx], [cy], "D", color=_PROVED, ms=6, zorder=6, gid="certified")
        if pinned:
            lx.annotate(f"observed FPR = {ev['fpr']:.2g}", (fx, ty), xytext=(8, -14), textcoords="offset points",
                        fontsize=7)
    lx.set_xscale("log")
    lx.set_yscale("log")
    lx.set_xlim(lo, 1)
    lx.set_ylim(lo, 2.0)  # points at TPR = 1 (perfect separation) stay in view
    lx.set_xlabel("false positive rate (log)")
    lx.set_ylabel("true positive rate = 1 - FNR (log)")
    lx.set_title("the same as an ROC, log-log: (eps, delta) is the line TPR = e^eps FPR + delta",
                 fontsize=9, y=1.0)
    _log_grid(lx, lo)

    # ------------------------------------------------------------------ title and legend
    src = method.get("epsilon_lower_bound_from", test)
    if epsilon_lower_bound is None:
        what = "gray-box finding: a pre-noise statistic exceeds its declared sensitivity (no trials)"
    else:
        what = (f"eps_lb = {epsilon_lower_bound:.3g} ({src.split(' ')[0]} test"
                + (f", mu_lb = {method['gaussian']['mu_lower_bound']:.3g} vs claimed {claim['mu']:.3g}"
                   if test == "gaussian" else "")
                + f") vs claimed eps {claim['epsilon']:.3g} at delta {claim['delta']:.2g}; "
                f"{n_ev} evaluation runs per side, confidence {data.get('confidence', 0.95):g}")
    title = f"{data['mechanism']}: {verdict.upper() if verdict == 'violation' else verdict}"
    lines = textwrap.wrap(title, 110) + textwrap.wrap(what, 130)
    fig.suptitle("\n".join(lines), fontsize=10, color=_FORBID if verdict == "violation" else "black")
    handles, labels = ax.get_legend_handles_labels()
    h2, l2 = lx.get_legend_handles_labels()
    fig.legend(handles + h2, labels + l2, loc="lower center", ncol=2, fontsize=7.5, frameon=False)
    fig.subplots_adjust(left=0.055, right=0.985, bottom=0.235, top=0.945 - 0.04 * len(lines), wspace=0.2)
    ax.set_label("tradeoff")
    lx.set_label("roc")
    return fig
