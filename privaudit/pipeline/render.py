"""The human views of a pipeline ``summary.json``: the stdout table and ``report.md``.

Both are rendered from the summary alone (:mod:`privaudit.pipeline.report`), so
they hold nothing the summary does not: no seed, no count of the private logs.
"""

from __future__ import annotations

from privaudit.core.formatting import guarantee_text, num, privacy_param
from privaudit.pipeline.certify import certification_lines
from privaudit.pipeline.report import summary_guarantee
from privaudit.pipeline.values import NOT_A_CERTIFICATE, NOT_A_CERTIFICATE_HELD


def _f(x, nd=4) -> str:
    return "n/a" if x is None else f"{x:.{nd}f}"


#: Columns of :func:`values_table`.
VALUES_COLUMNS = ("policy", "value", "certified", "held", "clinicians", "optimal")


def _held(p: dict) -> str:
    h = p.get("certificate_held")
    return "n/a" if h is None else ("yes" if h else "NO")


def values_table(summary: dict) -> list[tuple[str, ...]]:
    """Rows (policy, exact value, certified value, certificate held, clinicians, optimal), one per policy.

    The exact, clinicians' and optimal values need a known MDP (else n/a);
    the certified value (the learner's pessimistic value at a released or
    public start distribution) and whether it held (certified <= exact) are
    shown for every policy that has one.
    """
    return [(p["name"], _f(p["value"]), _f(p.get("certified_value")), _held(p), _f(p["clinicians_value"]),
             _f(p["optimal_value"])) for p in summary["policies"]]


def behaviour_line(summary: dict) -> str | None:
    """One line on the clinicians' DP value estimate, or None when it was not made."""
    b = summary.get("behaviour_value")
    if b is None:
        return None
    lo, hi = b["interval"]
    ex = b.get("exact_clinicians")
    return (f"DP estimate {b['estimate']:.4f}, {100 * b['confidence']:.0f}% interval [{lo:.4f}, {hi:.4f}] "
            "(mean logged return)" + ("" if ex is None else f"; the MDP's clinicians' policy: {ex:.4f}"))


def _level(summary: dict):
    """The level of the clinicians' DP interval (None when it was not made)."""
    return (summary.get("behaviour_value") or {}).get("confidence")


def _not_a_certificate(summary: dict, name: str) -> str:
    """What a learner's own pessimistic value is: with ``--hold-out`` certifying it, no advice to use --hold-out."""
    held = (summary.get("held_out_certification") or {}).get("policies") or {}
    return NOT_A_CERTIFICATE_HELD if name in held else NOT_A_CERTIFICATE


def format_table(summary: dict, out: str) -> str:
    """The short table printed on stdout at the end of ``privaudit pipeline``."""
    g = summary_guarantee(summary)
    parts = g["details"]["parts"]
    lines = [f"privaudit pipeline: {out}",
             f"  guarantee   {guarantee_text(g)}; "
             f"unit {g['privacy_unit']['column']}, k={g['privacy_unit']['max_episodes']}, substitution"]
    if len(parts) > 1:
        lines.append("  split       " + ", ".join(f"{p['name']} rho={privacy_param(p['rho'])}" for p in parts))
    rows = values_table(summary)
    w = max(len(r[0]) for r in rows + [("policy",), ("clinicians",)])
    widths = (w, 8, 9, 4, 10, 8)
    for r in [VALUES_COLUMNS] + rows:
        lines.append("  " + "  ".join(f"{c:<{wd}}" if i == 0 else f"{c:>{wd}}"
                                      for i, (c, wd) in enumerate(zip(r, widths))))
    for p in summary["policies"]:
        if p.get("certified_value") is not None and p.get("certified_confidence") is not None:
            lines.append(f"  certified   {p['name']}: {p['certified_value']:.4f} is a lower bound on its value, with "
                         f"probability >= {100 * p['certified_confidence']:g}% when its assumptions hold "
                         "(docs/certificates.md)")
    bl = behaviour_line(summary)
    if bl is not None:
        lines.append(f"  {'clinicians':<{w}}  {bl}")
    for n in summary.get("not_trained", []):
        lines.append(f"  not trained {n['name']}: {n['reason']}")
    for p in summary["policies"]:
        if p.get("pessimistic_estimate") is not None:
            lines.append(f"  note        {p['name']}: {p['pessimistic_estimate']:.4f} is a "
                         f"{_not_a_certificate(summary, p['name'])}")
    for p in summary["policies"]:
        dg = p.get("diagnostics")
        if dg and dg["fallback_share"] > 0.5:
            lines.append(f"  note        {p['name']} falls back to the tie-break (imitation of the behaviour) at "
                         f"{100 * dg['fallback_share']:.0f}% of its steps: too little data for this budget "
                         "to learn from outcomes (see report.md)")
    held = summary.get("held_out_certification")
    if held is not None:  # pipeline.certify: each policy's held-out lower bound next to the clinicians' interval
        lines += [f"  held-out    {line}" for line in certification_lines(held["policies"],
                                                                           held["clinicians_interval"], _level(summary))]
    a = summary["audit"]
    if a is None:
        lines.append("  audit       skipped")
    else:
        lb = "n/a" if a["epsilon_lower_bound"] is None else f"{a['epsilon_lower_bound']:.3g}"
        lines.append(f"  audit       {a['verdict']}: eps lower bound {lb} vs claimed {privacy_param(a['claim']['epsilon'])} "
                     f"({a['evaluation_trials_per_side']} evaluation runs per side; resolution "
                     f"{a['resolution_epsilon']:.3g})")
        if not a.get("can_refute", True):
            lines.append("  NOTE        the audit's resolution is not above the claimed epsilon: it could not have "
                         "refuted the claim at this run count (raise --audit-trials)")
    lines.append(f"  report      {out}/report.md   summary {out}/summary.json")
    if summary["rng"] != "secure":
        lines.append("  WARNING     seeded noise (--seed): for tests only, NOT private against anyone who knows the seed")
    return "\n".join(lines)


def _values_notes(summary: dict) -> list[str]:
    """report.md paragraphs on the certified values and the clinicians' DP estimate."""
    L = []
    sd = summary.get("start_distribution")
    if any(p.get("certified_value") is not None for p in summary["policies"]):
        L += ["**Certified values** (column *certified*) need no MDP: each is the learner's own pessimistic "
              "value at step 0, V_0(s) (below the policy's true value from s for every s at once, with "
              "probability at least 1 - failure_prob when the learner's assumptions hold), averaged over the "
              f"start distribution d0 = {sd['what'] if sd else 'n/a'}. It is post-processing of DP outputs (no "
              "row of the logs is read for it). With a released (noisy) d0 it is a lower confidence bound on "
              "that average (noise and sampling margins, failure probability 0.01 more), not the plug-in "
              "average. "
              "*held* says whether certified <= exact value (known MDP only). A pessimistic learner that "
              "falls back to imitation everywhere certifies its lowest value (0 reward per step, or the "
              "lowest reward when the range is negative): a true but uninformative certificate.", ""]
    else:
        L += ["No certified values: no learner with a proven certificate (docs/certificates.md) ran, or no start "
              "distribution is released or public (stationary release with `--value-share 0` and no `--mdp`).", ""]
    shy = [p for p in summary["policies"] if p.get("pessimistic_estimate") is not None]
    if shy:
        L += ["**Pessimistic estimates, not certificates**: " + "; ".join(
            f"`{p['name']}` {p['pessimistic_estimate']:.4f}" for p in shy) + ". Each is the learner's own "
              "pessimistic value at step 0 averaged over the same start distribution, but its lower-bound claim "
              "rests on the learner's paper's analysis, which docs/certificates.md does not prove: it is not "
              "shown as *certified*. `--hold-out` certifies these policies on units held out from training.", ""]
    b = summary.get("behaviour_value")
    if b is not None:
        m = b["mechanism"]
        lo, hi = b["interval"]
        rl, rh = m["return_range"]
        L += [f"**The clinicians' (behaviour) value, estimated with DP:** {b['estimate']:.4f}, "
              f"{100 * b['confidence']:.0f}% interval [{lo:.4f}, {hi:.4f}] (standard error {b['standard_error']:.4f}: "
              + (f"sampling {b['sampling_sd']:.4f}, DP noise {b['noise_sd']:.4f})" if b["sampling_sd"] > 0 else
                 f"DP noise {b['noise_sd']:.4f} only: the sampling part could not be estimated, its noisy "
                 "estimate (a sum of squared residuals) fell to 0 or below under the DP noise and was clipped to "
                 "0, so the interval leaves out the sampling spread of the returns and is too narrow; a larger "
                 "budget share (`--value-share`) or more data makes it estimable)")
              + ("" if b.get("exact_clinicians") is None else
                 f"; the MDP's clinicians' policy has exact value {b['exact_clinicians']:.4f} (the behaviour of "
                 "these logs only if they were simulated from it)") + ". "
              f"It is the mean return of the logged episodes over their first H steps, each return clipped to the "
              f"declared range [{num(rl)}, {num(rh)}] ({m['return_range_from']}), computed from noisy sums "
              f"released under the part `{b['privacy_part']}` of the budget (above). " + _interval_text(m), ""]
    return L


def _interval_text(mechanism: dict) -> str:
    """What the behaviour value's interval is over, by its mechanism version (absent: version 1)."""
    if mechanism.get("version") is None:
        return ("The interval is a normal (CLT) interval over the sampling of the episodes and the DP noise; it "
                "treats episodes as independent (mechanism version 1: too narrow when a patient's up to k "
                "stays are correlated).")
    if mechanism.get("interval_unit", "").startswith("privacy unit"):
        return ("The interval is a normal (CLT + delta method for a ratio) interval over the sampling of the "
                "privacy units, each with its up to k stays, correlated in any way (cluster-robust variance "
                "from noisy unit-level sums), and the DP noise.")
    return ("The interval is a normal (CLT) interval over the sampling of the episodes (one per privacy unit, "
            "k = 1) and the DP noise.")


def render_markdown(summary: dict) -> str:
    """The human report ``report.md`` (links are relative to the output folder)."""
    g = summary_guarantee(summary)
    dom = summary["domain"]
    unit = g["privacy_unit"]
    L = ["# privaudit pipeline report", "",
         f"Dataset `{summary['dataset_id']}` (spec hash `{summary['spec_hash'][:12]}...`), "
         f"H = {dom['H']}, S = {dom['S']}, A = {dom['A']}; counts "
         f"{'pooled over steps (stationary)' if dom['stationary'] else 'per step h'}. "
         f"privaudit {summary['software']['version']}, {summary['created']}.", ""]
    if summary["rng"] != "secure":
        L += ["> **WARNING: seeded noise (`--seed`).** For tests only: anyone who knows the seed can remove "
              "the noise. Do not share these outputs as private.", ""]
    L += ["## Privacy guarantee", "",
          f"Everything under `release/` and `policies/` and the value estimates together are "
          f"**rho = {privacy_param(g['rho'])} zCDP**, hence "
          f"**({privacy_param(g['epsilon'])}, {privacy_param(g['delta'])})-DP** ({g['conversion']}).", "",
          f"* Neighbouring datasets: {g['neighbouring']}.",
          f"* Privacy unit: `{unit['column']}`, at most k = {unit['max_episodes']} episode(s) per unit "
          "(extra episodes are dropped before counting). The guarantee protects one unit's whole contribution.",
          f"* Composition: {g['details']['composition']}."]
    for p in g["details"]["parts"]:
        L.append(f"* Part `{p['name']}`: rho = {privacy_param(p['rho'])} (alone: epsilon "
                 f"{privacy_param(p['epsilon_alone'])} at delta {privacy_param(g['delta'])}); {p['what']}."
                 + (f" Noise sampler: {p['sampler']['sampler']}; total variation to the ideal law "
                    f"{num(p['sampler']['total_variation_per_draw'])} per draw, so delta grows by "
                    f"{num(p['sampler']['extra_delta'])}." if p.get("sampler", {}).get("extra_delta") is not None
                    else ""))
    L += ["", "## Learned policies", ""]
    ev = summary["evaluation"]
    if ev is None:
        L += ["No MDP was given (`--mdp`), so the policies' exact values are unknown (n/a below); the "
              "certified values and the clinicians' DP estimate need none. The policies are in `policies/`.", ""]
    else:
        L += [f"Exact values on the MDP `{ev['mdp']}` (H = {ev['horizon']}): the expected total reward over "
              "H steps" + (" = the probability of survival within H steps" if ev["mdp"] == "icu-sepsis" else "")
              + ". Each learned policy is post-processing of a DP output.", ""]
    L += ["| " + " | ".join(VALUES_COLUMNS) + " |", "|" + "---|" * len(VALUES_COLUMNS)]
    L += ["| " + " | ".join(r) + " |" for r in values_table(summary)]
    L += [""] + [f"**`{n['name']}` was not trained:** {n['reason']}." for n in summary.get("not_trained", [])]
    L += [""] * bool(summary.get("not_trained")) + _values_notes(summary)
    held = summary.get("held_out_certification")
    if held is not None:  # pipeline.certify (--hold-out)
        L += ["", "**Held-out certification** (`--hold-out`; privaudit's docs/certificates.md): each policy's DP "
              f"lower bound on the privacy units held out from training ({held['split']}; {held['composition']}):",
              ""] + [f"* {line}" for line in certification_lines(held["policies"], held["clinicians_interval"], _level(summary))] + [""]
    if ev is not None and ev["references"]:
        L += ["Reference policies: " + ", ".join(f"{k} {v:.4f}" for k, v in ev["references"].items())
              + f"; optimal {ev['optimal_value']:.4f}.", ""]
    if "values" in summary["artifacts"]["figures"]:
        L += ["![values, certified values and the clinicians' DP estimate](figures/values.png)", ""]
    for p in summary["policies"]:
        dg = p.get("diagnostics")
        if not dg:
            continue
        cert = "" if dg["certified_value"] is None else (
            f" Its own pessimistic (certified) value estimate is {dg['certified_value']:.4f}.")
        if p.get("pessimistic_estimate") is not None:
            cert = (f" Its own pessimistic value is {p['pessimistic_estimate']:.4f}: a "
                    f"{_not_a_certificate(summary, p['name'])}.")
        L += [f"**How much `{p['name']}` learned.**{cert} At {100 * dg['fallback_share']:.1f}% of the steps "
              f"(weighted by {dg['fallback_weighting']}) every action's pessimistic value is 0: there the "
              "policy is only the tie-break, the action with the largest noisy visit count, i.e. an "
              "imitation of the behaviour policy, not learning from outcomes. This happens when the counts "
              "are small next to the noise bound E and the privacy penalty (S·H·E/n); more data or a "
              "larger budget shrinks it. A value above the clinicians' with a high fallback share is "
              "imitation, not evidence of a better treatment policy.", ""]
    L += ["## Audit of the release", ""]
    a = summary["audit"]
    if a is None:
        L += ["Skipped (`--audit-trials 0`).", ""]
    else:
        lb = "n/a" if a["epsilon_lower_bound"] is None else f"{a['epsilon_lower_bound']:.3g}"
        L += [f"The release's code path was run {a['trials_per_side']} times on each side of a neighbouring "
              f"pair D0 = logs + u*, D1 = logs + v* (`{a['pair']}`: u* and v* are synthetic units built from the "
              "spec alone, k full-length episodes each on disjoint cells, so the pair attains the declared "
              "sensitivity), attacked, and the attack's error rates turned into a lower bound on epsilon valid "
              f"with confidence {a['confidence']}. The outcome is the same for every logs (the release adds "
              "noise independently of the counts), so the audit reads none of them.", "",
              f"* Verdict: **{a['verdict']}**; epsilon lower bound **{lb}** vs claimed "
              f"{privacy_param(a['claim']['epsilon'])} at delta {privacy_param(a['claim']['delta'])} (test: "
              f"{a['test']}; the bound "
              f"comes from the {a.get('epsilon_lower_bound_from', 'generic')} test"
              + ("; the GDP test is valid here because the release's noise is continuous Gaussian, rounded"
                 if a["test"] == "gaussian" else "") + ").",
              f"* Gray-box check of the sensitivities on this pair: "
              f"{'violation' if a['graybox']['violation'] else 'passed' if a['graybox']['checked'] else 'not run'}.",
              f"* Resolution: with {a['evaluation_trials_per_side']} evaluation runs per side the {a['test']} test "
              f"could prove no bound above about {a['resolution_epsilon']:.3g}"
              + (f", which is not above the claimed epsilon {privacy_param(a['claim']['epsilon'])}: **this audit "
                 "could not "
                 "have refuted the claim at this run count** (raise --audit-trials)."
                 if not a.get("can_refute", True) else "."), "",
              "An audit can prove a claim **false** (a bound above the claim); it can never prove it true. "
              "\"No violation found\" means only that this attack, at this number of runs, found none.", "",
              "![audit trade-off](figures/audit_tradeoff.png)", ""]
    secure = summary["rng"] == "secure"
    ok = "yes" if secure else "**no** (seeded)"
    L += ["## Files: what may leave the building", ""]
    if not secure:
        L += ["Nothing may leave: this run's noise was drawn from `--seed` (rng `seeded-insecure`), so anyone "
              "who knows or guesses the seed can remove it. The files carry no seed value, but the noise in "
              "them is not private.", ""]
    L += ["| path | may leave? | what |", "|---|---|---|",
          f"| `release/` | {ok} | the DP release: noisy counts over the whole declared domain + `manifest.json` "
          "(guarantee, no seed value, no raw count) |",
          f"| `policies/` | {ok} | DP policies (post-processing of DP outputs) |",
          f"| `summary.json`, `report.md` | {ok} | guarantee, values on a public MDP, certified values and the "
          "clinicians' DP value estimate (post-processing of DP outputs), audit verdict; no count of "
          "rows, episodes or units, no timing, no seed value |",
          f"| `figures/values.png` | {ok} | the values chart: values, certified values, the clinicians' DP "
          "estimate (post-processing of DP outputs and values on a public MDP) |"]
    if a is not None:
        L.append(f"| `figures/audit_tradeoff.png` | {ok} | the audit's trade-off curve (same content as its verdict) |")
        L.append(f"| `audit/` | {ok} | the full audit report: the synthetic pair (from the spec), the attacks' "
                 "counts and bounds; nothing of the logs |")
    L += ["| `private/local-log.json` | **no** | what contribution bounding dropped or clipped, stage "
          "timings: facts about the private logs, for the data holder only |", "",
          "The audit reads nothing of the logs: its verdict, bound and figure are functions of the spec, the "
          "release manifest and the audit's own noise only.", ""]
    return "\n".join(L)
