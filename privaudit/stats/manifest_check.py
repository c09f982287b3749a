"""Internal-consistency check of a release manifest's privacy guarantee.

A manifest states a guarantee (rho, or epsilon; and the (epsilon, delta) of
the zCDP -> DP conversion) *and* the facts of the mechanism that produced the
release: the domain (H, stationary), the privacy unit (k = max_episodes), the
released families, their stored value units and their noise scales. The
guarantee is a function of those facts, so :func:`check_manifest_guarantee`
recomputes it and refuses a manifest whose stated guarantee is smaller (more
private) than the one its own facts imply, or whose stated sensitivities are
smaller than the formula of ``privaudit.privacy.sensitivity``. It catches a
hand edit of ``guarantee.rho``, of a ``noise_scale`` or of a sensitivity.

It does **not** authenticate the manifest: anyone who can write the release
folder can change the data, the ``rng`` field, or every fact consistently.
privaudit checks consistency, not provenance (docs/release.md, "Trust").
"""

from __future__ import annotations

import math

from privaudit.errors import ArtifactError, PrivauditError

#: Relative slack, in the pessimistic direction only, for floating-point error
#: between the writer's and this reader's arithmetic (sigma is rounded up by one
#: ulp when written; sums of shares differ in the last bits).
REL_TOL = 1e-9


def _below(stated: float, implied: float) -> bool:
    """True when ``stated`` claims less privacy loss than ``implied`` beyond REL_TOL."""
    return stated < implied * (1.0 - REL_TOL)


def check_manifest_guarantee(m: dict, where) -> dict:
    """Recompute the guarantee implied by a schema-valid release manifest; raise if it claims more.

    Parameters
    ----------
    m : dict
        A manifest that already passed ``schemas/release_manifest.schema.json``.
    where : str or Path
        The manifest's path, for messages.

    Returns
    -------
    dict
        ``{"rho": implied rho, "epsilon": implied pure-DP epsilon or None}``
        (Gaussian: rho = sum over families of l2_f^2 / (2 sigma_f^2);
        Laplace: epsilon = sum of l1_f / b_f and rho = epsilon^2 / 2), with
        l1_f, l2_f the larger of the recorded value and the formula
        ``count_sensitivity(H, k, stationary, f)`` x the family's stored-unit
        factor (the reward quantum q for rewards, as ``plan_noise`` does).

    Raises
    ------
    ArtifactError
        The families do not match ``public_reward``; a value unit or reward
        quantum other than the one ``plan_noise`` derives from the public
        noise scale; a noise-scale name that does not match the mechanism; a
        recorded sensitivity below the formula; a stated rho, epsilon,
        epsilon_simple, ledger charge or family share below the implied one
        (relative tolerance REL_TOL); a zCDP guarantee with delta outside (0, 1).

    References
    ----------
    Sensitivities: ``privaudit.privacy.sensitivity`` (seed 000 Thm 3.3 proof;
    ALGORITHMS.md 1.3, 1.4). Gaussian zCDP: Bun & Steinke 2016, Prop. 1.6 and
    Lemma 2.3 (composition). Conversion: Canonne, Kamath & Steinke 2020
    (``accounting.zcdp_to_dp``).
    """
    from privaudit.privacy import accounting
    from privaudit.privacy.sensitivity import count_sensitivity
    from privaudit.stats.release import reward_quantum

    def refuse(what: str):
        raise ArtifactError(f"{where}: {what}. The manifest is inconsistent with its own mechanism facts "
                            f"(edited by hand?); do not trust or use this release.")

    d, fams, mech = m["domain"], m["families"], m["mechanism"]
    H, k, stationary = d["H"], m["privacy_unit"]["max_episodes"], bool(d["stationary"])
    want = {"visits", "transitions"} | ({"rewards"} if m.get("public_reward") is None else set())
    if set(fams) != want:
        refuse(f"families {sorted(fams)} do not match the release's reward setting (expected {sorted(want)})")
    name = {"gaussian": "sigma", "laplace": "laplace_b"}.get(mech)
    if name is None:
        refuse(f"unknown mechanism {mech!r}")
    # stored-unit factor per family, exactly as plan_noise: 1 for counts, the quantum q for rewards,
    # q a function of the public natural-unit scale (= the visits' scale, stored in unit 1)
    natural = float(fams["visits"]["noise_scale"])
    q = reward_quantum(natural, mech, m["noise"]) if "rewards" in fams else None
    if "rewards" in fams and m.get("reward_quantum") != q:
        refuse(f"reward_quantum {m.get('reward_quantum')!r} differs from the quantum {q} that the "
               f"{mech} noise scale {natural:.6g} and noise mode {m['noise']!r} give")
    implied = 0.0
    shares = {}
    for f, fam in fams.items():
        unit = q if f == "rewards" else 1
        if not math.isclose(float(fam["value_unit"]), 1.0 / unit, rel_tol=1e-12):
            refuse(f"families.{f}.value_unit is {fam['value_unit']!r}, expected {1.0 / unit!r}")
        if fam["noise_scale_name"] != name:
            refuse(f"families.{f}.noise_scale_name is {fam['noise_scale_name']!r}; the {mech} mechanism uses {name!r}")
        try:
            s = count_sensitivity(H, k, stationary, f)
        except PrivauditError as e:
            refuse(f"cannot compute the sensitivity of {f!r}: {e}")
        l1, l2 = s.l1 * unit, s.l2 * unit
        for key, formula in (("l1_sensitivity", l1), ("l2_sensitivity", l2)):
            if _below(float(fam[key]), formula):
                refuse(f"families.{f}.{key} = {fam[key]!r} is below the formula's {formula!r} "
                       f"(H={H}, k={k}, stationary={stationary}, stored unit 1/{unit})")
        l1, l2 = max(l1, float(fam["l1_sensitivity"])), max(l2, float(fam["l2_sensitivity"]))
        scale = float(fam["noise_scale"])
        shares[f] = l2 ** 2 / (2.0 * scale ** 2) if mech == "gaussian" else l1 / scale
        implied += shares[f]
        key = "rho" if mech == "gaussian" else "epsilon"
        stated_share = fam["budget"].get(key)
        if stated_share is None or _below(float(stated_share), shares[f]):
            refuse(f"families.{f}.budget.{key} = {stated_share!r} is below the {shares[f]!r} implied by its "
                   f"sensitivity and noise scale {scale!r}")
    g = m["guarantee"]
    if mech == "gaussian":
        rho, eps_implied = implied, None
        if g["definition"] != "zCDP":
            refuse(f"guarantee.definition is {g['definition']!r}; a Gaussian release is 'zCDP'")
    else:
        rho, eps_implied = implied ** 2 / 2.0, implied
        if g["definition"] != "pure-DP":
            refuse(f"guarantee.definition is {g['definition']!r}; a Laplace release is 'pure-DP'")
        if _below(float(g["epsilon"]), eps_implied):
            refuse(f"guarantee.epsilon = {g['epsilon']!r} is below the epsilon = sum of l1/b = {eps_implied!r} "
                   f"implied by the noise scales")
    if _below(float(g["rho"]), rho):
        refuse(f"guarantee.rho = {g['rho']!r} is below the rho = {rho!r} implied by the sensitivities and "
               f"noise scales")
    if "ledger_charge_rho" in g and _below(float(g["ledger_charge_rho"]), rho):
        refuse(f"guarantee.ledger_charge_rho = {g['ledger_charge_rho']!r} is below the implied rho = {rho!r}")
    if mech == "gaussian":
        delta = float(g["delta"])
        if not 0.0 < delta < 1.0:
            refuse(f"guarantee.delta = {g['delta']!r}: a zCDP guarantee converts to (epsilon, delta) with "
                   f"delta in (0, 1)")
        eps = accounting.zcdp_to_dp(rho, delta)
        if _below(float(g["epsilon"]), eps):
            refuse(f"guarantee.epsilon = {g['epsilon']!r} at delta = {delta!r} is below zcdp_to_dp(implied "
                   f"rho = {rho!r}) = {eps!r}")
        if "epsilon_simple" in g:
            eps_s = accounting.zcdp_to_dp_simple(rho, delta)
            if _below(float(g["epsilon_simple"]), eps_s):
                refuse(f"guarantee.epsilon_simple = {g['epsilon_simple']!r} is below {eps_s!r} for the "
                       f"implied rho = {rho!r}")
    return {"rho": rho, "epsilon": eps_implied}
