"""The pipeline's values figure (``figures/values.png``): values, certificates and the clinicians' DP estimate.

matplotlib is imported inside the functions only, so importing this module
(and ``privaudit.pipeline``) stays cheap for commands that draw nothing. The
figure is a bare ``matplotlib.figure.Figure`` with fixed margins (no pyplot,
no ``tight_layout``), as the audit's trade-off figure: it costs a fraction of
the CPU in every pipeline run.

What it shows, side by side, for a reader who has not opened summary.json:

* each learned policy's **exact value** on the known MDP (filled dot), when
  an MDP is given;
* its **certified value** (the learner's lower confidence bound at the start
  distribution, ``privaudit.pipeline.values.certified_entries``; open
  triangle), joined to the exact value by a line: the certificate holds when
  the triangle lies left of the dot;
* the **clinicians' value estimated with DP** from the logged returns
  (``privaudit.release.behaviour_value``) with its confidence interval (error
  bar), next to the MDP's exact clinicians' value (dotted line) and the
  optimum v* (dashed line);
* other reference policies (grey dots).

Left panel: the whole declared return range, where certificates far below
the values are visible. Right panel (only when exact values exist): the same
rows zoomed on the values and the clinicians' interval; a certificate outside
the zoom is named at the left edge. Everything drawn is public: DP outputs,
post-processing of them, and values on a public MDP.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privaudit.core.atomic import atomic_path

__all__ = ["values_figure", "plot_values"]

_VALUE, _CERT, _CLIN, _OPT, _REF = "tab:blue", "navy", "tab:orange", "tab:green", "tab:gray"


def _rows(evaluation: dict | None, certified: dict, fallback: dict, behaviour: dict | None) -> list[dict]:
    """One row per learned policy, the clinicians' DP estimate, then the references (top to bottom)."""
    values = {} if evaluation is None else dict(evaluation["values"])
    names = list(values) + [n for n in certified if n not in values]
    rows = [{"kind": "policy", "name": n, "value": values.get(n), "cert": certified.get(n),
             "label": f"{n} (learned, DP)" + (f"\nimitation fallback at {100 * fallback[n]:.0f}% of steps"
                                              if fallback.get(n) else "")} for n in names]
    if behaviour is not None:
        conf = 100 * behaviour.get("confidence", 0.95)
        rows.append({"kind": "clinicians", "name": "clinicians", "value": behaviour["estimate"],
                     "interval": tuple(behaviour["interval"]),
                     "label": f"clinicians (behaviour)\nDP estimate, {conf:.0f}% interval"})
    refs = {} if evaluation is None else dict(evaluation["references"])
    rows += [{"kind": "reference", "name": n, "value": v, "label": n} for n, v in refs.items() if n != "clinicians"]
    return rows


def _draw(ax, rows: list[dict], evaluation: dict | None, xlim: tuple, zoom: bool) -> None:
    """Draw every row on ``ax`` within ``xlim`` (marks outside a zoomed axis are named at its edge)."""
    y = np.arange(len(rows))[::-1].astype(float)
    lo, hi = xlim
    for yi, r in zip(y, rows):
        v = r.get("value")
        if r["kind"] == "policy":
            c = r.get("cert")
            if v is not None and c is not None:  # the certificate's claim: certified <= exact
                ax.plot([max(min(c, v), lo), min(max(c, v), hi)], [yi, yi], color=_CERT, lw=1, alpha=0.5, zorder=2)
            if c is not None:
                if lo <= c <= hi:
                    ax.scatter([c], [yi], marker=">", facecolors="white", edgecolors=_CERT, s=70, zorder=3)
                    edge = c - lo < 0.1 * (hi - lo)  # near the left edge: the text starts at the mark
                    ax.annotate(f"cert {c:.4f}", (c, yi), xytext=(-4 if edge else 0, -14), textcoords="offset points",
                                ha="left" if edge else "center", fontsize=7, color=_CERT)
                else:
                    ax.annotate(f"◀ cert {c:.4f}", (lo, yi), xytext=(3, -13), textcoords="offset points",
                                ha="left", fontsize=7, color=_CERT)
            if v is not None:
                ax.scatter([v], [yi], color=_VALUE, s=60, zorder=4)
                ax.annotate(f"{v:.4f}", (v, yi), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=8)
        elif r["kind"] == "clinicians":
            a, b = r["interval"]
            ax.errorbar([v], [yi], xerr=[[v - a], [b - v]], fmt="D", color=_CLIN, ms=6, capsize=4, lw=1.5, zorder=4)
            ax.annotate(f"{v:.4f} [{a:.4f}, {b:.4f}]", (v, yi), xytext=(0, 8), textcoords="offset points",
                        ha="center", fontsize=8, color="saddlebrown")
        else:
            ax.scatter([v], [yi], color=_REF, s=45, zorder=3)
            ax.annotate(f"{v:.4f}", (v, yi), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=8)
    if evaluation is not None:
        opt, clin = evaluation["optimal_value"], evaluation["references"].get("clinicians")
        ax.axvline(opt, color=_OPT, ls="--", lw=1.5, label=f"optimum v* = {opt:.4f}")
        if clin is not None:
            ax.axvline(clin, color=_CLIN, ls=":", lw=1.5, label=f"clinicians (behaviour) = {clin:.4f}")
    ax.set_yticks(y, [r["label"] for r in rows], fontsize=8)
    ax.set_ylim(-0.8, len(rows) - 0.2)
    ax.set_xlim(lo, hi)
    ax.grid(axis="x", alpha=0.3)


def values_figure(evaluation: dict | None, fallback: dict | None = None, *, certified: dict | None = None,
                  behaviour: dict | None = None, return_range: tuple | None = None):
    """The values chart as a matplotlib Figure (see :func:`plot_values`).

    Parameters
    ----------
    evaluation : dict or None
        ``values`` (learned, exact), ``references`` (clinicians, uniform, ...),
        ``optimal_value``, ``mdp``, ``horizon``; None without a known MDP.
    fallback : dict, optional
        Learner -> share of its steps that fell back to the tie-break.
    certified : dict, optional
        Learner -> certified value (declared units) or None.
    behaviour : dict, optional
        The clinicians' DP estimate: ``estimate``, ``interval`` [lo, hi], ``confidence``.
    return_range : (float, float), optional
        The declared return range [G_min, G_max]: the left panel's axis
        (default: the span of the marks).

    Raises
    ------
    ValueError
        Nothing to draw (no evaluation, no certified value, no estimate).
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fallback = fallback or {}
    certified = {n: c for n, c in (certified or {}).items() if c is not None}
    rows = _rows(evaluation, certified, fallback, behaviour)
    if not rows:
        raise ValueError("values_figure: nothing to draw (no evaluation, certified value or behaviour estimate).")
    marks = [x for r in rows for x in (r.get("value"), r.get("cert")) + r.get("interval", ()) if x is not None]
    if evaluation is not None:
        marks += [evaluation["optimal_value"]] + [v for v in evaluation["references"].values() if v is not None]
    full = tuple(return_range) if return_range is not None else (min(marks), max(marks))
    pad = 0.04 * (full[1] - full[0] + 1e-9)
    full = (min(full[0], min(marks)) - pad, max(full[1], max(marks)) + pad)
    zoomed = evaluation is not None
    h = 0.7 * len(rows) + 2.2
    fig = Figure(figsize=(13.0 if zoomed else 7.5, h))
    axes = fig.subplots(1, 2 if zoomed else 1, sharey=zoomed, squeeze=False)[0]
    _draw(axes[0], rows, evaluation, full, zoom=False)
    unit = "" if evaluation is None else f" on {evaluation['mdp']} (H = {evaluation['horizon']})"
    axes[0].set_xlabel("value in the declared reward units" + (
        f"; axis = the declared return range [{return_range[0]:g}, {return_range[1]:g}]" if return_range else ""),
        fontsize=9)
    axes[0].set_title(("policies' values, their certified lower bounds" if zoomed else
                       "policies' certified lower bounds") + ", the clinicians' DP estimate", fontsize=10,
                      y=1.0)  # an explicit y: no tight-bbox pass to place the title (issue 19)
    if zoomed:
        near = [r.get("value") for r in rows] + [x for r in rows for x in r.get("interval", ())]
        near = [x for x in near if x is not None] + [evaluation["optimal_value"]]
        clin = evaluation["references"].get("clinicians")
        near += [clin] if clin is not None else []
        zpad = 0.15 * (max(near) - min(near) + 1e-9)
        _draw(axes[1], rows, evaluation, (min(near) - zpad, max(near) + zpad), zoom=True)
        axes[1].set_xlabel(f"exact value v^pi{unit}; axis zoomed, not from 0", fontsize=9)
        axes[1].set_title("zoom on the values", fontsize=10, y=1.0)
        axes[1].tick_params(axis="y", labelleft=False)
    kinds = {r["kind"] for r in rows}
    handles = ([Line2D([], [], marker="o", ls="", color=_VALUE, label="exact value of the learned policy")]
               if zoomed else [])
    if certified:
        handles.append(Line2D([], [], marker=">", ls="", markerfacecolor="white", color=_CERT,
                                  label="certified value (lower bound" + ("; holds if left of the dot)" if zoomed
                                                                          else " on the policy's value)")))
    if "clinicians" in kinds:
        handles.append(Line2D([], [], marker="D", ls="-", color=_CLIN,
                                  label="clinicians' value estimated with DP, and its interval"))
    h2, l2 = axes[-1].get_legend_handles_labels()
    fig.legend(handles=handles + h2, loc="lower center", ncol=3 if zoomed else 2, fontsize=8, framealpha=0.9,
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle("learned policies vs the clinicians and the optimum" if zoomed else
                 "certified values and the clinicians' DP estimate (no MDP: no exact values)", fontsize=11)
    inch = 1.0 / h  # fixed margins in inches: 2.3 for the row labels, 1.1 for the axis label and legend, 0.75 titles
    fig.subplots_adjust(left=2.3 / fig.get_figwidth(), right=1 - 0.25 / fig.get_figwidth(), bottom=1.1 * inch,
                        top=1 - 0.75 * inch, wspace=0.05)
    return fig


def plot_values(evaluation: dict | None, path: Path, fallback: dict | None = None, *, certified: dict | None = None,
                behaviour: dict | None = None, return_range: tuple | None = None) -> Path:
    """Write :func:`values_figure` as a PNG (atomically).

    Parameters
    ----------
    evaluation, fallback, certified, behaviour, return_range
        As :func:`values_figure`.
    path : Path
        PNG to write.
    """
    fig = values_figure(evaluation, fallback, certified=certified, behaviour=behaviour, return_range=return_range)
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    return Path(path)
