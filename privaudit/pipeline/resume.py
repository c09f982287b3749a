"""Paid-for outputs survive: a stopped pipeline run keeps what it charged, and a rerun finishes it without charging.

The release and the DP policies are charged to the budget (and the ledger)
when they are made; the stages after them (evaluate, audit, report) spend
nothing. When a run stops after a charge (an error, Ctrl-C, SIGTERM), the
run's folder is kept as ``out`` instead of being removed, holding only what
is complete and paid for:

``INCOMPLETE.json``          what is kept, what is missing, how to finish (no private fact)
``release/``                 the release, when it was charged
``policies/<name>/``         each charged policy (DP-PBB, DP-VAPVI)
``private/checkpoint.json``  PRIVATE: what a rerun needs (run id, fingerprints of the inputs, the release's
                             bounding facts, the behaviour-value statistics, the charged parts, a finished
                             held-out certification)
``private/checkpoint.npz``   PRIVATE: the charged learners' values (DP outputs: V_0 and the Q that chose the actions)

There is no ``summary.json``: an incomplete run is not a result. Running
the same command again (same configuration, spec, logs and ledger) resumes
it: the charged parts are read back, nothing is charged again, the missing
stages run and the folder becomes a complete output. Before reusing anything
the rerun compares fingerprints (SHA-256) of the configuration, the spec,
the logs' bytes and the ledger path, and requires the ledger to hold this
run's charges (by run id); any difference is refused (``UsageError``), so a
release is never reused for other data. The fingerprints stay in
``private/`` (a hash of the logs is a statistic of them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privaudit.core.atomic import atomic_path, atomic_write_text
from privaudit.core.errors import ArtifactError, UsageError
from privaudit.core.outputs import INCOMPLETE_MARKER
from privaudit.core.spec import DomainSpec
from privaudit.learners.policy import save_policy
from privaudit.privacy import ledger as ledger_mod
from privaudit.release.behaviour_value import ValueStatistics

#: The marker of an incomplete run (its ``kind``).
INCOMPLETE_KIND = "privaudit-pipeline-incomplete"
MARKER = INCOMPLETE_MARKER
CHECKPOINT = Path("private") / "checkpoint.json"
ARRAYS = Path("private") / "checkpoint.npz"
#: The configuration fields that decide what is charged and how it is post-processed (a rerun must repeat them);
#: ``audit_trials``, ``overwrite`` and ``progress`` may change (a rerun may skip a failing audit).
_CONFIG_FIELDS = ("rho", "epsilon", "delta", "mdp", "instance_seed", "seed", "stationary", "linear_share",
                  "value_share", "engine", "hold_out")


@dataclass(frozen=True)
class Checkpoint:
    """What a stopped run paid for, read back from its folder (:func:`read_checkpoint`)."""

    #: The incomplete run's folder.
    out: Path
    #: The stopped run's id (its ledger entries carry it; the rerun keeps it).
    run_id: str
    #: SHA-256 of the configuration, spec, logs and ledger path (:func:`fingerprint`): str -> str or None.
    fingerprint: dict
    #: The parts charged (str), in order (``release``, the behaviour value, ``dp-pbb``, ``dp-vapvi``).
    charged: tuple
    #: The release's private bounding facts (for ``private/local-log.json``).
    local: dict
    #: The behaviour-value release, when charged.
    value_stats: ValueStatistics | None
    #: ``"<part>.V0"`` (shape (S,)) and ``"<part>.Q"`` (shape (H, S, A)) of the charged tabular learners:
    #: str -> ndarray.
    arrays: dict
    #: The held-out certification (``hold_out``: DP estimates and bounds, charged), when the stopped run finished
    #: it.
    certification: dict | None = None
    #: The stage the run stopped in.
    stopped_in: str = ""
    #: The held-out evaluations the stopped run finished (and charged), by policy, when it stopped inside the
    #: certification: reused, not charged again.
    certified: dict = dataclasses.field(default_factory=dict)


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def logs_digest(logs) -> str | None:
    """SHA-256 over the bytes of the local Parquet logs (a file, or a folder's ``*.parquet`` parts by path).

    None when the logs are not local files (a Spark DataFrame, a URL): such a run is kept but cannot be resumed.
    """
    if not isinstance(logs, (str, Path)) or "://" in str(logs) or not Path(logs).exists():
        return None
    root = Path(logs)
    files = [root] if root.is_file() else sorted(f for f in root.rglob("*.parquet") if f.is_file())
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root) if f != root else f.name).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


def fingerprint(config, spec: DomainSpec, logs) -> dict:
    """SHA-256 fingerprints of what a resumed run must share with the stopped one.

    ``configuration``: the budget, shares, stationarity, MDP, seed and engine
    (:data:`_CONFIG_FIELDS`); ``spec``: ``DomainSpec.hash()``; ``logs``:
    :func:`logs_digest`; ``ledger``: the ledger's absolute path (or none).
    """
    conf = {k: getattr(config, k) for k in _CONFIG_FIELDS}
    if config.hold_out:  # the split decides which units train and which certify; a checkpoint written before the
        # fraction existed (an older split rule) then no longer matches, so it is not resumed into another split
        conf["hold_out_fraction"] = float(config.hold_out_fraction)
    if config.dp_apvi_c2 is not None:  # another DP-APVI constant learns another policy from the same release
        conf["dp_apvi_c2"] = float(config.dp_apvi_c2)
    if config.pbb_share is not None:  # another split of the budget
        conf["pbb_share"] = float(config.pbb_share)
    conf["mdp"] = None if conf["mdp"] is None else str(conf["mdp"])
    ledger = None if config.ledger is None else str(Path(config.ledger).absolute())
    data = logs_digest(logs)
    return {"configuration": _sha(conf), "spec": spec.hash(), "logs": data, "ledger": _sha(ledger)}


def is_incomplete(out: Path) -> bool:
    """True when ``out`` is a folder holding the marker of an incomplete pipeline run."""
    try:
        return json.loads((Path(out) / MARKER).read_text()).get("kind") == INCOMPLETE_KIND
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def read_checkpoint(out: Path) -> Checkpoint | None:
    """The checkpoint of the incomplete run in ``out``, or None when ``out`` holds none.

    Raises
    ------
    ArtifactError
        ``out`` is marked incomplete but its ``private/checkpoint.json`` or ``.npz`` is missing or unreadable.
    """
    out = Path(out)
    if not is_incomplete(out):
        return None
    try:
        doc = json.loads((out / CHECKPOINT).read_text())
        with np.load(out / ARRAYS, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        stats = doc["value_stats"]
        value_stats = None if stats is None else ValueStatistics(
            **{**stats, "start_states": arrays.pop("value.start_states")})
        return Checkpoint(out=out, run_id=str(doc["run_id"]), fingerprint=dict(doc["fingerprint"]),
                          charged=tuple(doc["charged"]), local=dict(doc["local"]), value_stats=value_stats,
                          arrays=arrays, certification=doc.get("certification"), stopped_in=str(doc["stopped_in"]),
                          certified=dict(doc.get("certified") or {}))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ArtifactError(f"{out}: marked incomplete ({MARKER}) but its checkpoint ({CHECKPOINT}, {ARRAYS}) "
                            f"cannot be read ({e}); its charged outputs cannot be reused. Keep the folder with "
                            "the ledger's records, and choose another `out`.") from None


def check_resumable(cp: Checkpoint, fp: dict, ledger) -> None:
    """Refuse to reuse ``cp`` unless this run's fingerprints equal the stopped run's and the ledger holds its charges.

    Raises
    ------
    UsageError
        The configuration, spec, logs or ledger differ (named), the logs cannot be fingerprinted, or the
        ledger lacks a charge of the stopped run (its run id) for one of the charged parts.
    """
    if fp["logs"] is None or cp.fingerprint.get("logs") is None:
        differ = ["logs (not local Parquet files: cannot tell they are the same)"]
    else:
        differ = [k for k in ("configuration", "spec", "logs", "ledger") if cp.fingerprint.get(k) != fp[k]]
    if differ:
        raise UsageError(f"`out` {cp.out} holds an incomplete run (charged: {', '.join(cp.charged)}) of other "
                         f"inputs (not the same: {', '.join(differ)}); its outputs are reused only by the same "
                         "command on the same data. Rerun it as it was, choose another `out`, or pass "
                         "`overwrite` to discard them (what they cost stays spent).")
    if ledger is not None:
        entries = ledger_mod.ledger_status(ledger)["entries"]
        ran = {e.get("description", "").split(" part:")[0].removeprefix("pipeline, ")
               for e in entries if e.get("run") == cp.run_id}
        missing = [p for p in cp.charged if p not in ran]
        if missing:
            raise UsageError(f"`out` {cp.out} holds an incomplete run {cp.run_id} whose charge(s) for "
                             f"{', '.join(missing)} are not in the ledger {ledger}; its outputs are not reused. "
                             "Use the ledger that run charged, or another `out`.")


def adopt(cp: Checkpoint, tmp: Path) -> None:
    """Bring the paid outputs of ``cp`` into the new run's temporary folder ``tmp`` (hard links where possible).

    The kept folder stays as it was until the new run replaces it, so a crash meanwhile loses nothing.
    """
    for name in ("release", "policies"):
        if (cp.out / name).is_dir():
            shutil.copytree(cp.out / name, tmp / name, copy_function=_link_or_copy)


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst)  # the files are never modified in place (atomic writes replace them)
    except OSError:
        shutil.copy2(src, dst)


def save(state, stopped_in: str, error: BaseException) -> str:
    """Turn the run's temporary folder into a kept incomplete run; return the line to tell the user.

    Keeps the charged release and policies and the private checkpoint; removes
    everything else the run had started (figures, the audit, any summary or
    report), so nothing half-made sits beside the paid outputs.
    """
    tmp, charged = state.tmp, list(state.events)
    keep = {"release"} if "release" in charged else set()
    for name, pol in state.policies.items():
        if name in charged:
            keep.add(f"policies/{name}")
            if not (tmp / "policies" / name).exists():
                save_policy(pol, tmp / "policies" / name)
    _prune(tmp, keep)
    arrays = {f"{name}.{k}": np.asarray(v) for name, d in state.paid.items() for k, v in d.items() if v is not None}
    stats = None
    if state.value_stats is not None:
        stats = {f.name: getattr(state.value_stats, f.name) for f in dataclasses.fields(state.value_stats)
                 if f.name != "start_states"}
        arrays["value.start_states"] = np.asarray(state.value_stats.start_states)
    (tmp / "private").mkdir(exist_ok=True)
    with atomic_path(tmp / ARRAYS) as p:
        with open(p, "wb") as f:
            np.savez(f, **arrays)
    private = {"WARNING": "PRIVATE: facts about the private logs, for the data holder only. Never share this file.",
               "run_id": state.run_id, "fingerprint": state.plan.fingerprint, "charged": charged,
               "stopped_in": stopped_in, "error": f"{type(error).__name__}: {error}", "local": state.local,
               "value_stats": stats,
               "certification": state.certification if "certify" in state.stages_done else None,
               "certified": state.certified}
    atomic_write_text(tmp / CHECKPOINT, json.dumps(private, indent=2, default=float) + "\n")
    missing = [s for s in state.stage_names if s not in state.stages_done]
    paid = paid_parts(charged, state.certified)
    marker = {"kind": INCOMPLETE_KIND, "status": "incomplete", "run_id": state.run_id, "stopped_in": stopped_in,
              "reason": type(error).__name__, "charged": paid, "kept": sorted(keep),
              "missing_stages": missing,
              "to_finish": "run the same command again (same configuration, spec, logs and ledger): the charged "
                           "parts are reused and nothing is charged again"}
    atomic_write_text(tmp / MARKER, json.dumps(marker, indent=2) + "\n")
    return (f"the pipeline stopped in its {stopped_in} stage; what was already charged ({', '.join(paid)}) is "
            f"kept in {state.out}, marked incomplete ({MARKER}): run the same command again to finish it "
            "without charging again")


def paid_parts(charged, certified) -> list[str]:
    """What a stopped run was charged, as the ledger names it: its parts, then each held-out certification."""
    return list(charged) + [f"held-out certification of {n}" for n in (certified or {})]


def clear(tmp: Path) -> None:
    """Remove the checkpoint and the marker from a run that completed."""
    for rel in (CHECKPOINT, ARRAYS, Path(MARKER)):
        (tmp / rel).unlink(missing_ok=True)


def _prune(tmp: Path, keep: set) -> None:
    """Remove from ``tmp`` everything but the kept paths (``release``, ``policies/<name>``) and ``private/``."""
    for p in sorted(tmp.iterdir()):
        if p.name == "private" or p.name in keep:
            continue
        if p.name == "policies" and p.is_dir():
            for q in p.iterdir():
                if f"policies/{q.name}" not in keep:
                    shutil.rmtree(q) if q.is_dir() else q.unlink()
            if not any(p.iterdir()):  # no policy kept: no empty folder either
                p.rmdir()
            continue
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    for p in (tmp / "private").glob("*") if (tmp / "private").is_dir() else ():
        if p.name not in (CHECKPOINT.name, ARRAYS.name):
            p.unlink()

