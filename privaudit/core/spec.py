"""The domain spec: the public facts about a trajectory dataset.

S, A, the horizon H, terminal states, the reward range, the privacy unit and
the most episodes one unit may contribute, the column mapping and the feature
map all come from here and never from the data (docs/data-format.md, "The
trajectory table"). A spec is a JSON file validated by ``schemas/spec.schema.json``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from privaudit.core.errors import SpecError
from privaudit.core.atomic import atomic_write_text
from privaudit.core.schemas import validate_or_raise

#: The standard column names of the trajectory table.
STANDARD_COLUMNS = (
    "episode_id", "step", "state", "action", "reward", "next_state",
    "terminated", "truncated", "unit_id", "features",
)
#: Columns every log must have (after mapping).
REQUIRED_COLUMNS = ("episode_id", "step", "state", "action", "reward", "next_state")

SPEC_FORMAT_VERSION = 1

#: Relative tolerance of a logged or modelled reward against the declared public reward
#: (:meth:`DomainSpec.public_reward_tolerance`).
PUBLIC_REWARD_RTOL = 1e-6


class StateActionSizes:
    """``n_states`` (S) and ``n_actions`` (A), for every object that states its domain's sizes.

    One definition for the MDPs, feature maps, count containers and
    environments: a subclass answers :meth:`_sizes` with (S, A), read from
    wherever it keeps them (an array's shape, the spec, an MDP).
    """

    def _sizes(self) -> tuple:
        """(S, A)."""
        raise NotImplementedError

    @property
    def n_states(self) -> int:
        """S."""
        return int(self._sizes()[0])

    @property
    def n_actions(self) -> int:
        """A."""
        return int(self._sizes()[1])



class DelegatedSizes(StateActionSizes):
    """``horizon`` (H), ``n_states`` (S) and ``n_actions`` (A) of an object that keeps its domain in another one.

    A subclass answers :meth:`_domain` with that object (a :class:`DomainSpec`, a tabular MDP: anything
    with ``horizon``, ``n_states`` and ``n_actions``); one definition for the count containers and
    environments that used to forward the three by hand.
    """

    def _domain(self):
        """The object holding ``horizon``, ``n_states`` and ``n_actions``."""
        raise NotImplementedError

    @property
    def horizon(self) -> int:
        """H."""
        return self._domain().horizon

    def _sizes(self) -> tuple:
        domain = self._domain()
        return domain.n_states, domain.n_actions



def _refuse_shared_columns(doc: dict, where: str) -> None:
    """Refuse a spec whose ``columns`` (and ``privacy_unit.column``) read one file column as two roles.

    ``{"state": "next_state"}`` read the next state as the state and was refused only at validation, as a
    puzzling ``next_state_mismatch`` on row 0. The unit may be the episode's own column (each episode a unit).
    """
    columns = doc.get("columns", {})
    roles: dict[str, list[str]] = {}
    for std in STANDARD_COLUMNS:
        if std != "unit_id":
            roles.setdefault(columns.get(std, std), []).append(std)
    unit = doc["privacy_unit"].get("column")
    if unit is not None and roles.get(unit, []) not in ([], ["episode_id"]):
        roles[unit].append("unit_id")
    shared = {col: r for col, r in roles.items() if len(r) > 1 and r != ["episode_id", "unit_id"]}
    if shared:
        col, r = next(iter(shared.items()))
        raise SpecError(f"{where}: file column {col!r} is read as {' and '.join(r)} ($.columns, "
                        "$.privacy_unit.column): each role needs its own column. Map each standard name to a "
                        "different column of the file.")

@dataclass(frozen=True)
class DomainSpec:
    """Public domain of a trajectory dataset (immutable)."""

    #: H, the most steps per episode; steps are h = 0..H-1.
    horizon: int
    #: S; states are integers in [0, S).
    n_states: int
    #: A; actions are integers in [0, A).
    n_actions: int
    #: (r_min, r_max); rewards are clipped into it and scaled to [0, 1] before any statistic.
    reward_range: tuple[float, float]
    #: k, the most episodes one privacy unit may contribute.
    max_episodes_per_unit: int
    #: Standard name ``unit_id`` is used when the spec names a unit column; None means each episode is its own
    #: privacy unit.
    unit_column: str | None = None
    #: States where the MDP ends (absorbing, reward 0 afterwards).
    terminal_states: tuple[int, ...] = ()
    #: ``{"kind": "next_state", "values": {s': r}}`` when the reward function is public (then rewards are not
    #: released); None when rewards are private.
    public_reward: dict | None = None
    #: Standard name -> the user's column name, str -> str (identity for unlisted names).
    columns: dict = field(default_factory=dict)
    #: Feature-map settings for linear learners.
    features: dict | None = None
    #: Dataset name for the budget ledger ("unnamed" if absent).
    dataset_id: str = "unnamed"
    #: (G_min, G_max), declared: the return of every episode (sum of its rewards over steps h < H, each clipped into
    #: ``reward_range``; raw reward units) lies in it. None when not declared. Learners use the scaled image
    #: :attr:`scaled_return_max` / :meth:`value_bounds`.
    return_bound: tuple[float, float] | None = None
    #: The JSON document as read (for hashing and writing back).
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    #: Where the spec was read from (relative feature-table paths resolve there).
    source: Path | None = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, doc: Any, source: Path | None = None) -> "DomainSpec":
        """Build a spec from a parsed JSON document.

        Raises
        ------
        SpecError
            If the document breaks ``schemas/spec.schema.json`` (the message
            names each offending key and the reason) or is inconsistent
            (terminal state outside [0, S), r_min >= r_max or an end not finite, ``columns.unit_id``
            naming another column than ``privacy_unit.column``, ...).
        """
        where = f"spec {source}" if source else "spec"
        validate_or_raise(doc, "spec", SpecError, where)
        S, A = doc["n_states"], doc["n_actions"]
        lo, hi = float(doc["reward_range"][0]), float(doc["reward_range"][1])
        if not (np.isfinite(lo) and np.isfinite(hi)) or lo >= hi:
            raise SpecError(f"{where}: $.reward_range must hold [r_min, r_max], both finite, "
                            f"with r_min < r_max. Found {doc['reward_range']}.")
        terminals = tuple(int(t) for t in doc.get("terminal_states", []))
        bad = [t for t in terminals if t >= S]
        if bad:
            raise SpecError(f"{where}: $.terminal_states must lie in [0, n_states={S}). Found {bad}.")
        pr = doc.get("public_reward")
        if pr is not None:
            bad_keys = [k for k in pr["values"] if int(k) >= S]
            if bad_keys:
                raise SpecError(f"{where}: $.public_reward.values keys must be states in [0, {S}). Found {bad_keys}.")
            states = np.array([int(k) for k in pr["values"]], dtype=np.int64)
            uniq, n = np.unique(states, return_counts=True)
            if (n > 1).any():  # '3' and '03' both name state 3: two values for one r(s')
                s_dup, times = int(uniq[n > 1][0]), int(n[n > 1][0])
                names = ", ".join(repr(k) for k in pr["values"] if int(k) == s_dup)
                raise SpecError(f"{where}: $.public_reward.values names state {s_dup} {times} times ({names}); "
                                "list each state once.")
            bad_vals = [v for v in pr["values"].values() if not lo <= v <= hi]
            if bad_vals:
                raise SpecError(f"{where}: $.public_reward.values must lie in reward_range {[lo, hi]}. Found {bad_vals}.")
        rb = _return_bound(doc, where, lo, hi, int(doc["horizon"]))
        unit = doc["privacy_unit"].get("column")
        mapped = doc.get("columns", {}).get("unit_id")
        if mapped is not None and mapped != unit:
            # the bounding groups on columns.unit_id while the manifest would promise privacy_unit.column:
            # a patient with m stays and k = 1 would keep them all (about m^2 rho), so refuse the spec
            raise SpecError(
                f"{where}: $.columns.unit_id maps the unit to column {mapped!r}, but $.privacy_unit.column is "
                + (f"{unit!r}" if unit is not None else "absent (each episode its own unit)")
                + ". The two must name the same column: set $.privacy_unit.column to the column that "
                  "identifies a person (e.g. patient_id) and remove $.columns.unit_id or make it equal.")
        _refuse_shared_columns(doc, where)
        return cls(
            horizon=int(doc["horizon"]),
            n_states=int(S),
            n_actions=int(A),
            reward_range=(lo, hi),
            max_episodes_per_unit=int(doc["privacy_unit"]["max_episodes"]),
            unit_column=unit,
            terminal_states=terminals,
            public_reward=pr,
            columns=dict(doc.get("columns", {})),
            features=doc.get("features"),
            dataset_id=doc.get("dataset_id", "unnamed"),
            return_bound=rb,
            raw=json.loads(json.dumps(doc)),
            source=source,
        )

    @property
    def H(self) -> int:  # noqa: N802 - the field's standard symbol
        """Alias of ``horizon``."""
        return self.horizon

    @property
    def S(self) -> int:  # noqa: N802
        """Alias of ``n_states``."""
        return self.n_states

    @property
    def A(self) -> int:  # noqa: N802
        """Alias of ``n_actions``."""
        return self.n_actions

    def column(self, standard: str) -> str:
        """The user's name for standard column ``standard``.

        ``unit_id`` maps to the privacy-unit column when the spec names one.
        """
        if standard == "unit_id" and "unit_id" not in self.columns and self.unit_column:
            return self.unit_column
        return self.columns.get(standard, standard)

    @property
    def unit_file_column(self) -> str:
        """The column of the user's files that contribution bounding groups on.

        ``privacy_unit.column`` when the spec names one, else the file's
        episode-id column (``columns.episode_id``, default ``episode_id``):
        each episode is then its own unit. Recorded in release manifests.
        """
        return self.unit_column if self.unit_column else self.column("episode_id")

    @property
    def scaled_return_max(self) -> float:
        """Largest return, in [0, 1]-scaled reward units, of any bounded episode.

        Returns
        -------
        float
            H without a declared ``return_bound``; with one (G_min, G_max),
            max over episode lengths L = 1..H of min(L, (G_max - L r_min) /
            (r_max - r_min)): an L-step episode with raw return G has scaled
            return (G - L r_min) / (r_max - r_min), and each scaled reward is
            at most 1. With r_min = 0 this is min(H, G_max / r_max)
            (ICU-Sepsis: 1). Bounding enforces it on the logs
            (``privaudit.data.bounding``: running scaled return clipped at it),
            so it holds for any input, as sensitivities need.
        """
        H = self.horizon
        if self.return_bound is None:
            return float(H)
        lo, hi = self.reward_range
        L = np.arange(1, H + 1, dtype=float)
        return float(np.max(np.minimum(L, (self.return_bound[1] - L * lo) / (hi - lo))))

    def value_bounds(self) -> np.ndarray:
        """Upper bounds of the scaled value-to-go at each step, for learners.

        Returns
        -------
        ndarray of float, shape (H + 1,)
            b[h] = min(H - h, :attr:`scaled_return_max`) for h = 0..H (0-based;
            b[H] = 0): any policy's value-to-go from step h, in [0, 1]-scaled
            reward units, lies in [0, b[h]], since scaled rewards are >= 0 and
            a suffix of an episode returns at most the whole episode. Use it
            in place of H - h for clipping Q and V, Hoeffding widths and the
            sensitivity of value-weighted sums (sum over s' of n(s, a, s')
            V(s') changes by at most b[h+1] per step moved).

        Notes
        -----
        The units are those of the scaled rewards r' = (r - r_min) / (r_max -
        r_min) with terminal states earning 0 in r' units. When r_min = 0 that
        is also the learners' planning frame (``learners.pessimism.RewardFrame``
        is then the identity); with r_min != 0 a learner planning in another
        frame converts the declared ``return_bound`` itself.
        """
        H = self.horizon
        return np.minimum(np.arange(H, -1, -1, dtype=float), self.scaled_return_max)

    def public_reward_vector(self) -> np.ndarray | None:
        """r(s') of shape (S,) for a ``next_state`` public reward, else None."""
        if self.public_reward is None:
            return None
        r = np.zeros(self.n_states)
        for k, v in self.public_reward["values"].items():
            r[int(k)] = float(v)
        return r

    def public_reward_scaled(self) -> np.ndarray | None:
        """r(s') of shape (S,) clipped into the reward range and scaled to [0, 1], as
        the logs' rewards are bounded (``data.bounding``); None without a public reward."""
        r = self.public_reward_vector()
        if r is None:
            return None
        lo, hi = self.reward_range
        return (np.clip(r, lo, hi) - lo) / (hi - lo)

    def public_reward_tolerance(self) -> float:
        """Largest difference from the declared public reward r(s') that still counts as equal, in reward units.

        Returns
        -------
        float
            ``PUBLIC_REWARD_RTOL * max(r_max - r_min, |r_min|, |r_max|)``
            (1e-6 for the range [0, 1]). It absorbs the rounding of a reward
            stored as float32 (relative error 2^-24, about 6e-8, of a value at
            most max(|r_min|, |r_max|) in size) or written as a decimal, and is
            negligible for learning: learners scale rewards by 1 / (r_max -
            r_min), so a difference below it moves a scaled reward by at most
            1e-6 (ranges that contain 0). Used by the validation rule
            ``reward_not_public`` (logged reward vs r(next_state)) and by the
            check of a spec against a known MDP
            (``privaudit.mdp.spec_check``).
        """
        lo, hi = self.reward_range
        return PUBLIC_REWARD_RTOL * max(hi - lo, abs(lo), abs(hi))

    def to_dict(self) -> dict:
        """The JSON document of this spec."""
        return json.loads(json.dumps(self.raw))

    def hash(self) -> str:
        """SHA-256 of the canonical JSON of the spec (sorted keys), as hex, without ``$.written_by``.

        Recorded in release manifests so learners can check that a release
        and a spec belong together (:func:`spec_content_hash`: a spec with or without the
        provenance mark of its writer hashes alike).
        """
        return spec_content_hash(self.raw)

    def __repr__(self) -> str:
        return (f"DomainSpec(H={self.horizon}, S={self.n_states}, A={self.n_actions}, "
                f"reward_range={self.reward_range}, "
                + ("" if self.return_bound is None else f"return_bound={self.return_bound}, ")
                + f"k={self.max_episodes_per_unit}, "
                f"unit={self.unit_column!r}, terminals={len(self.terminal_states)})")


def _return_bound(doc: dict, where: str, r_min: float, r_max: float, H: int) -> tuple[float, float] | None:
    """The declared ``return_bound`` as floats, checked against itself, the reward range and H.

    Raises
    ------
    SpecError
        Non-finite ends, G_min >= G_max (a degenerate bound: every return
        equal, so there is nothing to estimate or learn, and the learners'
        and the value estimate's clipping ranges need G_min < G_max), or an interval that no episode of
        1..H steps with rewards in [r_min, r_max] can reach (it misses
        [min(r_min, H r_min), max(r_max, H r_max)]), or an end beyond
        [H min(r_min, 0), H max(r_max, 0)], the range every bounded episode's
        return lies in and the one used without a declaration
        (``release.behaviour_value.return_range``): such an end clips
        nothing, yet the clinicians' value estimate would take the declared
        range as is, and its noise scales with G_max - G_min. The message
        names the widest meaningful bound.
    """
    rb = doc.get("return_bound")
    if rb is None:
        return None
    g_lo, g_hi = float(rb[0]), float(rb[1])
    if not (np.isfinite(g_lo) and np.isfinite(g_hi)) or g_lo >= g_hi:
        raise SpecError(f"{where}: $.return_bound must hold [G_min, G_max] with G_min < G_max, both finite. "
                        f"Found {rb}.")
    reach_lo, reach_hi = min(r_min, H * r_min), max(r_max, H * r_max)
    if g_hi < reach_lo or g_lo > reach_hi:
        raise SpecError(f"{where}: $.return_bound {rb} is inconsistent with reward_range {[r_min, r_max]} and "
                        f"horizon H={H}: an episode of 1..H steps returns a value in [{reach_lo}, {reach_hi}], "
                        "which the declared interval misses. Fix the bound (it sums the rewards of one episode).")
    # the range without a declaration: H rewards in the range, 0 after a terminal state (behaviour_value.return_range)
    h_lo, h_hi = H * min(r_min, 0.0), H * max(r_max, 0.0)
    if g_lo < h_lo or g_hi > h_hi:
        widest = [max(g_lo, h_lo), min(g_hi, h_hi)]
        fix = (f"declare at most {_num_list(widest)}" if widest[0] < widest[1] else "declare a bound inside it")
        raise SpecError(f"{where}: $.return_bound {rb} is wider than any episode can return: at most H={H} rewards "
                        f"in reward_range {[r_min, r_max]} (0 after a terminal state) sum to a value in "
                        f"{_num_list([h_lo, h_hi])}. An end beyond that clips nothing, yet the clinicians' value "
                        f"estimate would add noise for the whole declared width; {fix}, or omit return_bound.")
    return g_lo, g_hi


def _num_list(xs) -> str:
    """[a, b] with each end as short as it reads (20 rather than 20.0)."""
    return "[" + ", ".join(f"{x:g}" for x in xs) + "]"


def load_spec(path: str | Path) -> DomainSpec:
    """Read and validate a domain spec from a JSON file.

    Raises
    ------
    SpecError
        If the file is missing, not UTF-8, not JSON (or nested too deeply to
        read), or breaks the schema.
    """
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:
        raise SpecError(f"cannot read spec {p}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SpecError(f"spec {p} is not UTF-8 text: byte 0x{e.object[e.start]:02x} at position {e.start}. "
                        "Save it as UTF-8 JSON.") from None
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise SpecError(f"spec {p} is not valid JSON: line {e.lineno} column {e.colno}: {e.msg}") from None
    except _DuplicateKey as e:
        raise SpecError(f"spec {p}: key {e.args[0]!r} appears twice in one object; JSON readers keep one of the "
                        "two values silently. Keep one.") from None
    except RecursionError:
        raise SpecError(f"spec {p} nests its arrays or objects too deeply for the JSON reader (a spec is a few "
                        "levels deep): is it the right file?") from None
    return DomainSpec.from_dict(doc, source=p.resolve())


class _DuplicateKey(ValueError):
    """A JSON object names one key twice (``json.loads`` would keep the last value)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    """``object_pairs_hook`` for :func:`load_spec`: a dict, refusing a key named twice in one object."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


#: The key of a spec's provenance mark: ``{"tool": ..., "sha256": ...}`` (:func:`mark_written_by`).
WRITTEN_BY_KEY = "written_by"


def spec_content_hash(doc: dict) -> str:
    """SHA-256 (hex) of the canonical JSON (sorted keys, no spaces) of spec ``doc`` without ``$.written_by``.

    The hash of :meth:`DomainSpec.hash` and of the provenance mark; ``doc`` is a parsed spec
    document (any JSON object; nothing is validated).
    """
    rest = {k: v for k, v in doc.items() if k != WRITTEN_BY_KEY}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def mark_written_by(doc: dict, tool: str) -> dict:
    """A copy of spec ``doc`` carrying the provenance mark ``$.written_by = {"tool": tool, "sha256": H}``.

    ``H`` is :func:`spec_content_hash` of the rest, so the mark holds only while nobody edits the
    spec: ``simulate --overwrite`` replaces a spec only if :func:`written_by` still names it
    (an edited copy of a simulated spec is someone's input). Readers ignore the mark.
    """
    out = {k: v for k, v in doc.items() if k != WRITTEN_BY_KEY}
    out[WRITTEN_BY_KEY] = {"tool": tool, "sha256": spec_content_hash(out)}
    return out


def written_by(doc: object) -> str | None:
    """The tool named by the provenance mark of spec document ``doc`` if the mark still holds, else None.

    None when ``doc`` is not a JSON object, has no well-formed ``$.written_by``, or its content
    was edited since (its :func:`spec_content_hash` differs from the mark's ``sha256``). Never raises.
    """
    mark = doc.get(WRITTEN_BY_KEY) if isinstance(doc, dict) else None
    if not isinstance(mark, dict) or not isinstance(mark.get("tool"), str):
        return None
    try:
        return mark["tool"] if mark.get("sha256") == spec_content_hash(doc) else None
    except (TypeError, ValueError):  # a value JSON cannot encode (never from a parsed file)
        return None


def write_spec(spec_doc: dict, path: str | Path) -> None:
    """Validate ``spec_doc`` and write it atomically to ``path`` as JSON."""
    DomainSpec.from_dict(spec_doc)
    atomic_write_text(Path(path), json.dumps(spec_doc, indent=2) + "\n")
