"""One shape of the stated guarantee (the envelope) for every artifact, and the reader of the shapes before it.

Every artifact that states a privacy guarantee writes it through
:func:`envelope`: a policy's ``privacy.guarantee``, a release manifest's
``guarantee``, an explore manifest's ``guarantee``, the pipeline
summary's ``privacy`` and the claim an audit report tests (``claim``). The keys are the same, in the same order, in each:

1. the statement (``privaudit.privacy.accounting.guarantee``: ``definition``,
   ``rho``, ``epsilon``, ``delta``, ``conversion``, ...; an explore run's
   ``private``, ``epsilon``, ``delta``, ``rho``, ``statement``, ``note``; an
   audit's claim: ``epsilon``, ``delta``, ``rho``, ``kind``, ``mu``,
   ``conversion``), as stated;
2. ``sampler`` (``privaudit.privacy.samplers.noise_statement``, or null),
   ``mechanism`` (``gaussian`` / ``laplace``; null for a non-private explore
   run), ``noise`` (``exact``, ``rounded``, ``continuous``; null likewise),
   ``neighbouring`` (in words), ``privacy_unit`` (``{"column",
   "max_episodes"}``, plus a release's ``file_column`` and ``max_per_cell``;
   in words for the simulated users of an explore run, who have no column),
   ``rng``, ``event`` (the privacy event: one mechanism's, or the composed
   event of several; null when the artifact records none: an audit's claim
   states no mechanism, sampler, noise or event) and ``details``:
   the artifact's own facts (DP-VAPVI's words, ``released_object`` and
   lattices; the pipeline's ``composition``, ``split`` and ``parts``; an
   explore run's joint-DP words and lattices), ``{}`` when it has none.

The schema is ``schemas/envelope.schema.json`` (each artifact's schema refers
to it and may narrow it). A guarantee without ``details`` is read as one
written before the envelope. Files are never rewritten on reading (a file read
and written again keeps its bytes): :func:`as_envelope` is the one function
that reads any artifact's guarantee, old shape or new, in the envelope's
shape; each artifact gives it the facts it recorded outside its guarantee
before the envelope (a release manifest's mechanism, noise, unit, rng and
event; a summary's rng).
"""

from __future__ import annotations

from collections.abc import Mapping

from privaudit.core.artifact import Guarantee
from privaudit.core.errors import ArtifactError

__all__ = ["envelope", "as_envelope", "claim_envelope", "report_claim", "privacy_unit", "noise_mode",
           "ENVELOPE_KEYS", "EXPLORE_WORDS", "PIPELINE_DETAILS", "AUDIT_UNIT"]

#: The keys every guarantee holds after its statement, in their order on disk.
ENVELOPE_KEYS = ("sampler", "mechanism", "noise", "neighbouring", "privacy_unit", "rng", "event", "details")
#: Keys of the shapes before the envelope that it replaces (DP-VAPVI's): never copied from a statement.
_REPLACED = ("max_episodes_per_unit", "released_object", "grid")
#: The order of a privacy unit's keys (a release manifest's ``privacy_unit`` order).
_UNIT_KEYS = ("column", "file_column", "max_episodes", "max_per_cell")
#: An explore run's joint-DP words (``details`` in the envelope; at the top of its guarantee before it).
EXPLORE_WORDS = ("notion", "protected_from", "not_protected")
#: The pipeline's own facts (``details`` in the envelope; at the top of summary.json's ``privacy`` before it).
PIPELINE_DETAILS = ("composition", "split", "parts")
#: The keys of the DP claim an audit tests, as ``privaudit.audit.claim.Claim.to_dict`` states it.
_CLAIM_KEYS = ("epsilon", "delta", "rho", "kind", "mu", "conversion")
#: The privacy unit of an audit's claim, in words: the pair decides it (the report's ``neighbouring_pair``).
AUDIT_UNIT = "one privacy unit: what the audit's neighbouring pair replaces (neighbouring_pair)"
#: The label of an explore run's composed event (``Accountant.composed("explore")``).
_EXPLORE_LABEL = "explore"


def envelope(statement: Mapping, *, mechanism: str | None, noise: str | None, neighbouring: str, unit,
             rng: str, event: Mapping | None = None, sampler: Mapping | None = None,
             details: Mapping | None = None) -> Guarantee:
    """The guarantee an artifact states, in the one shape every artifact writes (module docstring).

    Parameters
    ----------
    statement : mapping
        The accountant's statement (a release's guarantee, with its ``sampler``, included), or an explore
        run's (``private``, ``epsilon``, ``delta``, ``rho``, ``statement``, ``note``).
    mechanism : {"gaussian", "laplace"} or None
        The noise family (None: no noise, a non-private explore run).
    noise : {"exact", "rounded", "continuous"} or None
        The sampler mode (None likewise).
    neighbouring : str
        The neighbouring relation in words (``Neighbouring.description``).
    unit : mapping or str
        The privacy unit: ``column`` and ``max_episodes`` (k), optionally ``file_column`` and
        ``max_per_cell`` (c) as a release manifest's ``privacy_unit`` records them (None values left out);
        or words, for simulated users who have no column.
    rng : {"secure", "seeded-insecure"}
        Where the noise came from (a test seed is never written).
    event : mapping, optional
        The privacy event (``PrivacyEvent.to_dict()``, a composed event for several mechanisms); else null.
    sampler : mapping, optional
        What the noise sampler adds (``samplers.noise_statement``); default: the statement's own, else null.
    details : mapping, optional
        The artifact's own facts (JSON-ready); default ``{}``.

    Returns
    -------
    Guarantee
        The statement's keys (those of :data:`ENVELOPE_KEYS` and the replaced ones excepted), then
        :data:`ENVELOPE_KEYS` in order.
    """
    doc = {k: v for k, v in dict(statement).items() if k not in ENVELOPE_KEYS + _REPLACED}
    if isinstance(unit, Mapping):
        unit = {k: unit[k] for k in _UNIT_KEYS if unit.get(k) is not None}
    doc.update(sampler=statement.get("sampler") if sampler is None else sampler, mechanism=mechanism, noise=noise,
               neighbouring=neighbouring, privacy_unit=unit, rng=rng, event=event, details=dict(details or {}))
    return Guarantee(doc)


def claim_envelope(claim: Mapping, *, relation: str, rng: str) -> Guarantee:
    """The DP claim an audit tests, in the envelope's shape (the audit report's ``claim``).

    The claim as stated (``epsilon``, ``delta``, ``rho``, ``kind``, ``mu``,
    ``conversion``: ``Claim.to_dict()``), then no sampler, mechanism, noise or
    event (a claim is tested on any mechanism and states none of them), the
    pair's neighbouring relation, the unit in words (:data:`AUDIT_UNIT`), the
    rng of the audit's runs and no details.

    Parameters
    ----------
    claim : mapping
        ``Claim.to_dict()``.
    relation : str
        The neighbouring pair's relation (``substitution`` or ``add/remove``).
    rng : {"secure", "seeded-insecure"}
        Where the noise of the audit's runs came from (the report's ``rng_mode``).
    """
    return envelope(claim, mechanism=None, noise=None, neighbouring=relation, unit=AUDIT_UNIT, rng=rng)


def report_claim(report: Mapping) -> Guarantee:
    """An audit report's claim in the envelope's shape, whichever shape it was written in (:func:`as_envelope`
    with the report's facts: its pair's relation, its ``rng_mode``). The report is not rewritten."""
    relation = (report.get("neighbouring_pair") or {}).get("relation", "substitution")
    return as_envelope(report["claim"], neighbouring=relation, rng=report["rng_mode"])


def noise_mode(modes) -> str | None:
    """The ``noise`` of several mechanisms' noise modes: ``exact`` when every one is, else the first other mode
    in alphabetical order (``continuous`` before ``rounded``); None when there is none (no noise drawn)."""
    modes = set(modes)
    return None if not modes else "exact" if modes == {"exact"} else min(modes - {"exact"})


def privacy_unit(guarantee: Mapping):
    """A guarantee's privacy unit as ``{"column", "max_episodes", ...}``, whichever shape it was written in.

    DP-VAPVI's guarantee before the envelope recorded the column name and
    ``max_episodes_per_unit`` beside it; every other shape records the
    object. Returns the value as stated where it is neither (an explore run
    states its unit in words), None when not recorded.
    """
    unit = guarantee.get("privacy_unit")
    if isinstance(unit, str) and "max_episodes_per_unit" in guarantee:
        return {"column": unit, "max_episodes": guarantee["max_episodes_per_unit"]}
    return dict(unit) if isinstance(unit, Mapping) else unit


def as_envelope(guarantee: Mapping, **facts) -> Guarantee:
    """Any artifact's guarantee in the envelope's shape (:func:`envelope`), whichever shape it was written in.

    The one reader of every guarantee. A guarantee already in the envelope's
    shape (it has ``details``) is returned as it is. The shapes before the
    envelope (read, never rewritten):

    - policies: DP-APVI's and DP-PBB's (the envelope's keys without
      ``details``; ``sampler`` or ``event`` absent: null) and DP-VAPVI's
      (``privacy_unit`` a column name with ``max_episodes_per_unit``; read as an
      exact discrete Gaussian mechanism, the words, ``released_object`` and
      ``grid`` under ``details``, as DP-VAPVI writes them now);
    - a release manifest's accountant statement: ``facts`` gives the
      manifest's ``mechanism``, ``noise``, ``neighbouring``, ``privacy_unit``,
      ``rng`` and ``event``;
    - an explore run's flat joint-DP record: the JDP words and ``grid`` under
      ``details``; ``events`` as one composed event (label ``explore``); the
      mechanism and noise of its events (null when it has none); ``rng`` null
      in manifests written before it was recorded (never guessed);
    - the pipeline summary's ``privacy``: ``composition``, ``split`` and
      ``parts`` under ``details``; ``facts`` gives the summary's ``rng``; the
      mechanism (Gaussian) and the noise of its event (or of its release
      part's sampler);
    - an audit report's ``claim`` (:func:`claim_envelope`): ``facts`` gives
      the pair's relation (``neighbouring``) and the report's ``rng_mode``
      (``rng``); :func:`report_claim` passes them.

    Parameters
    ----------
    guarantee : mapping
        As read from the artifact.
    **facts
        Envelope keys the artifact recorded outside its guarantee before the envelope (a key the guarantee
        records wins).

    Raises
    ------
    ArtifactError
        Not a guarantee any artifact wrote (no mechanism, neighbouring relation, rng or privacy unit with its
        k, and no artifact facts giving them).
    """
    if "details" in guarantee:
        return guarantee if isinstance(guarantee, Guarantee) else Guarantee(guarantee)
    g = {**{k: v for k, v in facts.items() if k not in guarantee}, **guarantee}
    if "notion" in g:
        return _explore(g)
    if "parts" in g:
        return _pipeline(g)
    if set(_CLAIM_KEYS) <= set(g) and "mechanism" not in g:
        return claim_envelope({k: v for k, v in g.items() if k not in ("neighbouring", "rng")},
                              relation=g["neighbouring"], rng=g["rng"])
    unit = privacy_unit(g)
    missing = [k for k in ("mechanism", "neighbouring", "rng") if k not in g]
    if missing or not isinstance(unit, Mapping):
        raise ArtifactError("this guarantee records no "
                            + ", ".join(missing + ([] if isinstance(unit, Mapping) else ["privacy unit and k"]))
                            + ", and its artifact gave none: it has no envelope shape.")
    details, mechanism, noise = {}, g["mechanism"], g.get("noise")
    if not isinstance(g["privacy_unit"], Mapping):  # DP-VAPVI before the envelope: exact discrete Gaussian
        details = {"description": mechanism, **{k: g[k] for k in _REPLACED[1:] if k in g}}
        mechanism, noise = "gaussian", "exact"
    return envelope(g, mechanism=mechanism, noise=noise, neighbouring=g["neighbouring"], unit=unit,
                    rng=g["rng"], event=g.get("event"), details=details)


def _explore(g: dict) -> Guarantee:
    """An explore run's flat joint-DP record (format version 1 before the envelope) in the envelope's shape."""
    events = list(g.get("events") or [])
    leaves = [leaf for e in events for leaf in _leaf_dicts(e)]
    mechanisms = {leaf.get("mechanism", leaf.get("kind")) for leaf in leaves}
    statement = {k: v for k, v in g.items() if k not in EXPLORE_WORDS + ("events",)}
    details = {**{k: g[k] for k in EXPLORE_WORDS if k in g}, **({"grid": g["grid"]} if "grid" in g else {})}
    return envelope(statement, mechanism=min(mechanisms) if mechanisms else None,
                    noise=noise_mode(leaf.get("noise") for leaf in leaves),
                    neighbouring=g["neighbouring"], unit=g["privacy_unit"], rng=g.get("rng"),
                    event={"kind": "composed", "label": _EXPLORE_LABEL, "events": events} if events else None,
                    sampler=g.get("sampler"), details=details)


def _pipeline(g: dict) -> Guarantee:
    """summary.json's ``privacy`` before the envelope in the envelope's shape: a zCDP composition of Gaussian
    mechanisms; the noise of its event's leaves (summaries written before events: of the release part's
    sampler, exact when it adds nothing), the release part's sampler (if recorded) as the summary's."""
    sampler = next((p["sampler"] for p in g["parts"] if "sampler" in p), None)
    if g.get("event") is not None:
        noise = noise_mode(leaf.get("noise", "exact") for leaf in _leaf_dicts(g["event"]))
    else:
        noise = None if sampler is None else "exact" if sampler.get("total_variation_per_draw") == 0 else "continuous"
    statement = {k: v for k, v in g.items() if k not in PIPELINE_DETAILS}
    return envelope(statement, mechanism="gaussian", noise=noise, neighbouring=g["neighbouring"],
                    unit=g["privacy_unit"], rng=g.get("rng"), event=g.get("event"), sampler=sampler,
                    details={k: g[k] for k in PIPELINE_DETAILS})


def _leaf_dicts(event: Mapping):
    """The leaves of a privacy event as written (``PrivacyEvent.to_dict()``: composed events nest theirs under
    ``events``, self-composed ones under ``event``; a first-version explore record is its own leaf)."""
    if event.get("kind") == "composed":
        return [leaf for e in event["events"] for leaf in _leaf_dicts(e)]
    if event.get("kind") == "self_composed":
        return _leaf_dicts(event["event"])
    return [event]
