"""The lower bounds on epsilon that DP-Sniper and StatDP report for the literature's mechanisms.

Source. Bichsel, Steffen, Bogunovic & Vechev 2021 ("DP-Sniper: Black-Box Discovery of Differential Privacy
Violations using Classifiers") report their results as a figure of powers (the lower bound each tool
proves, per mechanism, every mechanism claiming eps = 0.1). The values are cited from the authors' published
reference results, from which their artifact's eval_sp2021/plots/create_plots.py draws that figure (the
paper's text was not available when this table was written, so no table or row of the paper is cited):
repository eth-sri/dp-sniper, folder
eval_sp2021/reference-results/ (commit ee087b2), the field ``eps_lcb`` of dd_search_reg_data.log (DD-Search
with logistic regression), dd_search_mlp_data.log (with a neural network), statdp_1_data.log (their re-run
of StatDP with a fix, "StatDP-Fixed", first run) and floating_point_data.log (the float Laplace, neural
network on the output's bits). DP-Sniper's bounds (default configuration) hold with confidence 0.9 and use
10.7 million samples per input to train and 200 million to estimate the final bound; they are not at privaudit's run counts.

Ding, Wang, Wang, Zhang & Kifer 2018 ("Detecting Violations of Differential Privacy", StatDP) report
p-values against a grid of test epsilons in figures, not lower bounds: "not reported" for StatDP itself.
The StatDP column is DP-Sniper's re-run, labelled so.

None means not reported. Never fill a gap with a guess.
"""

from __future__ import annotations

#: case -> (DP-Sniper logistic regression, DP-Sniper neural network, StatDP-Fixed run 1 as re-run by
#: Bichsel et al., the mechanism's name in their artifact).
PUBLISHED = {
    "rnm_laplace": (0.0923, 0.0925, 0.0920, "ReportNoisyMax1"),
    "rnm_exponential": (0.0975, 0.0979, 0.0996, "ReportNoisyMax2"),
    "rnm_laplace_value": (0.2478, 0.2488, 0.1991, "ReportNoisyMax3"),
    "rnm_exponential_value": (0.3463, 0.3534, 0.1960, "ReportNoisyMax4"),
    "hist_laplace": (0.0978, 0.0977, 0.0828, "NoisyHist1"),
    "hist_wrong_scale": (4.6020, 4.6015, 9.7169, "NoisyHist2"),
    "svt1": (0.0858, 0.0858, 0.0298, "SparseVectorTechnique1"),
    "svt2": (0.0859, 0.0852, 0.0316, "SparseVectorTechnique2"),
    "svt3": (0.1716, 0.1822, 0.0231, "SparseVectorTechnique3"),
    "svt4": (0.1687, 0.1696, 0.1709, "SparseVectorTechnique4"),
    "svt5": (1.7612, 1.7610, 14.3143, "SparseVectorTechnique5"),
    "svt6": (0.2720, 0.2698, 0.3220, "SparseVectorTechnique6"),
    "numerical_svt_float": (0.0343, 0.0345, None, "NumericalSVT"),
    "float_laplace": (None, 0.2521, None, "floating_point (pair 1 vs 0 only)"),
}


def dpsniper_best(case: str, pair: str | None = None) -> float | None:
    """DP-Sniper's larger published bound (logistic regression or neural network) for ``case``, or None.

    The float Laplace bound is for the pair (0, 1) only (``pair`` "0 vs 1"); other pairs: not reported."""
    row = PUBLISHED.get(case)
    if row is None or (case == "float_laplace" and pair not in (None, "0 vs 1")):
        return None
    vals = [v for v in row[:2] if v is not None]
    return max(vals) if vals else None


def statdp_fixed(case: str) -> float | None:
    """StatDP-Fixed (Bichsel et al.'s re-run of StatDP, first run), or None when not reported."""
    row = PUBLISHED.get(case)
    return None if row is None else row[2]
