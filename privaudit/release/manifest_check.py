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

from privaudit.core.errors import AccountingError, ArtifactError, PrivauditError
from privaudit.privacy import accounting
from privaudit.privacy.events import ComposedEvent, Neighbouring, PrivacyUnit, event_from_dict
from privaudit.privacy.noise import FAMILIES
from privaudit.privacy.sensitivity import count_sensitivity
from privaudit.release.manifest import ReleaseManifest
from privaudit.release.mechanism import reward_quantum

#: Relative slack, in the pessimistic direction only, for floating-point error
#: between the writer's and this reader's arithmetic (sigma is rounded up by one
#: ulp when written; sums of shares differ in the last bits).
REL_TOL = 1e-9


def _below(stated: float, implied: float) -> bool:
    """True when ``stated`` claims less privacy loss than ``implied`` beyond REL_TOL."""
    return stated < implied * (1.0 - REL_TOL)


def check_manifest_guarantee(m: ReleaseManifest, where) -> dict:
    """Re-derive the guarantee of a schema-valid release manifest from its event; raise if it claims more.

    The event is rebuilt from the manifest's mechanism facts (one leaf per
    family: its stored-unit sensitivity, at least the formula's, and its noise
    scale; the privacy unit and k; the noise mode). A manifest that stores its
    ``event`` (written since events exist) must store exactly that event; an
    older manifest without one is read through the rebuilt event. The
    guarantee is then derived by ``accounting.guarantee``, the function that
    wrote it, and every stated figure must be at least the derived one.

    Parameters
    ----------
    m : ReleaseManifest
        A manifest read by ``ReleaseManifest.from_dict`` (format version and schema already checked).
    where : str or Path
        The manifest's path, for messages.

    Returns
    -------
    dict
        ``{"rho": derived rho, "epsilon": derived pure-DP epsilon or None,
        "event": the event}``.

    Raises
    ------
    ArtifactError
        The families do not match ``public_reward``; a value unit or reward
        quantum other than the one the mechanism derives from the public
        noise scale; a noise-scale name that does not match the mechanism; a
        recorded sensitivity below the formula; a stored event other than the
        one the facts give; a stated rho, epsilon, epsilon_simple, ledger
        charge or family share below the derived one (relative tolerance
        REL_TOL); a zCDP guarantee with delta outside (0, 1); a guarantee in
        the envelope's shape whose mechanism, noise, neighbouring relation,
        privacy unit, rng or event differ from the manifest's own.

    References
    ----------
    Sensitivities: ``privaudit.privacy.sensitivity`` (Qiao & Wang (2023), Section 3;
    docs/release.md, "Where the numbers come from"). Gaussian zCDP: Bun & Steinke 2016, Prop. 1.6 and
    Lemma 2.3 (composition). Conversion: Canonne, Kamath & Steinke 2020
    (``accounting.zcdp_to_dp``).
    """
    def refuse(what: str):
        raise ArtifactError(f"{where}: {what}. The manifest is inconsistent with its own mechanism facts "
                            f"(edited by hand?); do not trust or use this release.")

    d, fams, mech = m.domain, m.families, m.mechanism
    H, k, stationary = d.H, m.privacy_unit.max_episodes, d.stationary
    c = m.privacy_unit.max_per_cell  # None: no per-cell cap
    want = {"visits", "transitions"} | ({"rewards"} if m.public_reward is None else set())
    if set(fams) != want:
        refuse(f"families {sorted(fams)} do not match the release's reward setting (expected {sorted(want)})")
    noise_fam = FAMILIES.get(mech)
    if noise_fam is None:
        refuse(f"unknown mechanism {mech!r}")
    name = noise_fam.scale_key
    # stored-unit factor per family, exactly as plan_noise: 1 for counts, the quantum q for rewards,
    # q a function of the public natural-unit scale (= the visits' scale, stored in unit 1)
    natural = float(fams["visits"].noise_scale)
    q = reward_quantum(natural, mech, m.noise) if "rewards" in fams else None
    if "rewards" in fams and m.reward_quantum != q:
        refuse(f"reward_quantum {m.reward_quantum!r} differs from the quantum {q} that the "
               f"{mech} noise scale {natural:.6g} and noise mode {m.noise!r} give")
    unit_of_privacy = PrivacyUnit(m.privacy_unit.column, int(k))
    leaves = []
    for f, fam in fams.items():
        unit = q if f == "rewards" else 1
        if not math.isclose(float(fam.value_unit), 1.0 / unit, rel_tol=1e-12):
            refuse(f"families.{f}.value_unit is {fam.value_unit!r}, expected {1.0 / unit!r}")
        if fam.noise_scale_name != name:
            refuse(f"families.{f}.noise_scale_name is {fam.noise_scale_name!r}; the {mech} mechanism uses {name!r}")
        try:
            s = count_sensitivity(H, k, stationary, f, max_per_cell=c)
        except PrivauditError as e:
            refuse(f"cannot compute the sensitivity of {f!r}: {e}")
        l1, l2 = s.l1 * unit, s.l2 * unit
        for key, stated, formula in (("l1_sensitivity", fam.l1_sensitivity, l1),
                                     ("l2_sensitivity", fam.l2_sensitivity, l2)):
            if _below(float(stated), formula):
                refuse(f"families.{f}.{key} = {stated!r} is below the formula's {formula!r} "
                       f"(H={H}, k={k}, c={c}, stationary={stationary}, stored unit 1/{unit})")
        l1, l2 = max(l1, float(fam.l1_sensitivity)), max(l2, float(fam.l2_sensitivity))
        scale = float(fam.noise_scale)
        common = dict(family=f, unit=unit_of_privacy, neighbouring=Neighbouring.SUBSTITUTION, noise=m.noise,
                      max_per_cell=c)
        leaf = noise_fam.event({"l1": l1, "l2": l2}[noise_fam.norm], scale, **common)
        leaves.append(leaf)
        key = noise_fam.budget_unit
        share = noise_fam.cost(leaf)
        stated_share = fam.budget.get(key)
        if stated_share is None or _below(float(stated_share), share):
            refuse(f"families.{f}.budget.{key} = {stated_share!r} is below the {share!r} implied by its "
                   f"sensitivity and noise scale {scale!r}")
    event = ComposedEvent(tuple(leaves), label="tabular-release")
    if m.event is not None:
        try:
            stored = event_from_dict(m.event)
        except AccountingError as e:
            refuse(f"its stored event is not a privacy event ({e})")
        if stored != event:
            refuse("its stored event differs from the event its families' sensitivities and noise scales give")
    g = m.guarantee
    if g["definition"] != noise_fam.definition:
        refuse(f"guarantee.definition is {g['definition']!r}; a {noise_fam.title} release is "
               f"{noise_fam.definition!r}")
    delta = float(g["delta"])
    if not noise_fam.pure and not 0.0 < delta < 1.0:
        refuse(f"guarantee.delta = {g['delta']!r}: a zCDP guarantee converts to (epsilon, delta) with "
               f"delta in (0, 1)")
    derived = accounting.guarantee(event, delta=0.0 if noise_fam.pure else delta,
                                   requested=dict(g.get("requested", {})))
    for key in ("rho", "epsilon", "epsilon_simple", "ledger_charge_rho"):
        if key in g and key in derived and _below(float(g[key]), derived[key]):
            at = f" at delta = {delta!r}" if key.startswith("epsilon") and not noise_fam.pure else ""
            refuse(f"guarantee.{key} = {g[key]!r}{at} is below the {key} = {derived[key]!r} derived from its "
                   f"event (its sensitivities and noise scales)")
    if "details" in g:  # the envelope (privaudit.core.envelope) repeats the manifest's facts: they must agree
        own = {"mechanism": mech, "noise": m.noise, "neighbouring": m.neighbouring, "rng": m.rng,
               "privacy_unit": m.privacy_unit.to_dict(), "event": m.event}
        for key, value in own.items():
            if g[key] != value:
                refuse(f"guarantee.{key} is {g[key]!r} but the manifest's {key} is {value!r}")
    return {"rho": derived["rho"], "epsilon": derived["epsilon"] if noise_fam.pure else None, "event": event}
