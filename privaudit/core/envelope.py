"""One shape of a policy's guarantee (the envelope), and the reader of the shapes policies had before it.

Every private policy states its guarantee in ``policy.json``'s
``privacy.guarantee``. Before the envelope, each learner composed that record
by hand, in three shapes: DP-APVI (the release's guarantee plus mechanism,
noise, neighbouring, ``privacy_unit`` as an object, rng), DP-PBB (the same
plus event and sampler) and DP-VAPVI (``privacy_unit`` a column name beside
``max_episodes_per_unit``, the mechanism in words, ``released_object``,
``grid``, event). Now every learner calls :func:`envelope`, so the common keys
are the same, in the same order, for every learner:

1. the accountant's statement (``privaudit.privacy.accounting.guarantee``:
   ``definition``, ``rho``, ``epsilon``, ``delta``, ``conversion``, ...), as
   stated;
2. ``sampler`` (``privaudit.privacy.samplers.noise_statement``, or null),
   ``mechanism`` (``gaussian`` / ``laplace``), ``noise`` (``exact``,
   ``rounded``, ``continuous``), ``neighbouring``, ``privacy_unit``
   (``{"column", "max_episodes"}``, plus the release's ``file_column`` and
   ``max_per_cell`` for a policy fitted on a release), ``rng``, ``event`` (or
   null), and ``details``: the mechanism's own facts (DP-VAPVI's words,
   ``released_object`` and lattices), ``{}`` when it has none.

The schema is ``$defs.envelope`` of ``schemas/policy.schema.json``; a guarantee
without ``details`` is read as one written before the envelope
(``$defs.before_envelope``). Files are not rewritten on reading (a policy read
and written again keeps its bytes): :func:`as_envelope` gives any policy's
guarantee in the envelope's shape for readers that need the common keys.
"""

from __future__ import annotations

from collections.abc import Mapping

from privaudit.core.artifact import Guarantee
from privaudit.core.errors import ArtifactError

__all__ = ["envelope", "as_envelope", "privacy_unit", "ENVELOPE_KEYS"]

#: The keys every policy's guarantee holds after the accountant's statement, in their order on disk.
ENVELOPE_KEYS = ("sampler", "mechanism", "noise", "neighbouring", "privacy_unit", "rng", "event", "details")
#: Keys of the shapes before the envelope that it replaces (DP-VAPVI's): never copied from a statement.
_REPLACED = ("max_episodes_per_unit", "released_object", "grid")
#: The order of a privacy unit's keys (a release manifest's ``privacy_unit`` order).
_UNIT_KEYS = ("column", "file_column", "max_episodes", "max_per_cell")


def envelope(statement: Mapping, *, mechanism: str, noise: str, neighbouring: str, unit: Mapping, rng: str,
             event: Mapping | None = None, sampler: Mapping | None = None,
             details: Mapping | None = None) -> Guarantee:
    """The guarantee a policy states, in the one shape every learner writes (module docstring).

    Parameters
    ----------
    statement : mapping
        The accountant's statement (a release's guarantee, with its ``sampler``, included).
    mechanism : {"gaussian", "laplace"}
        The noise family.
    noise : {"exact", "rounded", "continuous"}
        The sampler mode.
    neighbouring : str
        The neighbouring relation in words (``Neighbouring.description``).
    unit : mapping
        The privacy unit: ``column`` and ``max_episodes`` (k), optionally ``file_column`` and
        ``max_per_cell`` (c) as a release manifest's ``privacy_unit`` records them (None values left out).
    rng : {"secure", "seeded-insecure"}
        Where the noise came from (a test seed is never written).
    event : mapping, optional
        The privacy event (``PrivacyEvent.to_dict()``) when the mechanism records one (else null).
    sampler : mapping, optional
        What the noise sampler adds (``samplers.noise_statement``); default: the statement's own, else null.
    details : mapping, optional
        The mechanism's own facts (JSON-ready); default ``{}``.

    Returns
    -------
    Guarantee
        The statement's keys (those of :data:`ENVELOPE_KEYS` and the replaced ones excepted), then
        :data:`ENVELOPE_KEYS` in order.
    """
    doc = {k: v for k, v in dict(statement).items() if k not in ENVELOPE_KEYS + _REPLACED}
    doc.update(sampler=statement.get("sampler") if sampler is None else sampler, mechanism=mechanism, noise=noise,
               neighbouring=neighbouring, privacy_unit={k: unit[k] for k in _UNIT_KEYS if unit.get(k) is not None},
               rng=rng, event=event, details=dict(details or {}))
    return Guarantee(doc)


def privacy_unit(guarantee: Mapping):
    """A policy guarantee's privacy unit as ``{"column", "max_episodes", ...}``, whichever shape it was written in.

    DP-VAPVI's guarantee before the envelope recorded the column name and
    ``max_episodes_per_unit`` beside it; every other policy shape records the
    object. Returns the value as stated where it is neither (an explore run
    states its unit in words), None when not recorded.
    """
    unit = guarantee.get("privacy_unit")
    if isinstance(unit, str) and "max_episodes_per_unit" in guarantee:
        return {"column": unit, "max_episodes": guarantee["max_episodes_per_unit"]}
    return dict(unit) if isinstance(unit, Mapping) else unit


def as_envelope(guarantee: Mapping) -> Guarantee:
    """A policy's guarantee in the envelope's shape (:func:`envelope`), whichever shape it was written in.

    The reader of the shapes policies had before the envelope (format
    version 1 files): DP-APVI's and DP-PBB's (the envelope's keys without
    ``details``; ``sampler`` or ``event`` absent: null) and DP-VAPVI's
    (``privacy_unit`` a column name with ``max_episodes_per_unit``; read as
    an exact discrete Gaussian mechanism, the words, ``released_object`` and
    ``grid`` under ``details``, as DP-VAPVI writes them now). A guarantee
    already in the envelope's shape is returned as it is.

    Raises
    ------
    ArtifactError
        Not a policy's guarantee (no mechanism, neighbouring relation, rng or
        privacy unit with its k: a release's or an explore run's statement).
    """
    if "details" in guarantee:
        return guarantee if isinstance(guarantee, Guarantee) else Guarantee(guarantee)
    unit = privacy_unit(guarantee)
    missing = [k for k in ("mechanism", "neighbouring", "rng") if k not in guarantee]
    if missing or not isinstance(unit, Mapping):
        raise ArtifactError("this guarantee is not a policy's (it records no "
                            + ", ".join(missing + ([] if isinstance(unit, Mapping) else ["privacy unit and k"]))
                            + "): it has no envelope shape.")
    details, mechanism, noise = {}, guarantee["mechanism"], guarantee.get("noise")
    if not isinstance(guarantee["privacy_unit"], Mapping):  # DP-VAPVI before the envelope: exact discrete Gaussian
        details = {"description": mechanism, **{k: guarantee[k] for k in _REPLACED[1:] if k in guarantee}}
        mechanism, noise = "gaussian", "exact"
    return envelope(guarantee, mechanism=mechanism, noise=noise, neighbouring=guarantee["neighbouring"], unit=unit,
                    rng=guarantee["rng"], event=guarantee.get("event"), details=details)
