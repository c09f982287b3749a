"""The pieces of an audit: the claim under test and how a mechanism is called.

A mechanism is any callable ``fn(logs, rng) -> ndarray`` of fixed shape
(``logs``: polars DataFrame in the standard schema; ``rng``: numpy
Generator). If it accepts a keyword ``n_runs``, ``fn(logs, rng, n_runs=N)``
must return N independent runs stacked on axis 0 (vectorized). Optional
hooks an adapter may provide:

* ``make_pair(logs, spec, strategy, rng=...) -> NeighbouringPair``: build the
  canary pair the mechanism is most sensitive to (used instead of
  ``neighbours.make_pair`` when no explicit pair is given; e.g. dp-vapvi);
* ``prepare(d, d_prime) -> mechanism``: bind to the pair before any trial
  (e.g. choose the public view of a release); the returned object is used;
* ``exact_statistics(logs) -> dict[name, ndarray]`` and
  ``declared_sensitivity() -> dict[name, {"l1": .., "l2": ..}]``: the
  pre-noise statistics and their declared sensitivities, for the gray-box
  check (AUDITING.md 4.1 "gray-box first");
* ``noise() -> dict[name, {"mechanism": "gaussian"|"laplace", "scale": ..}]``:
  lets the gray-box check say how much privacy a sensitivity excess costs;
* ``attack_scores(pair) -> list[(name, fn)]``: extra fixed scores
  ``fn(outputs: (n, *shape)) -> (n,)`` (e.g. "the policy acts as the canary").
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from privaudit.errors import UsageError

CLAIM_KINDS = ("generic", "gaussian")


@dataclass(frozen=True)
class Claim:
    """A DP claim under test (substitution of one privacy unit).

    Attributes
    ----------
    epsilon : float
        Claimed epsilon at ``delta`` (for a rho claim: the tight
        Canonne-Kamath-Steinke conversion).
    delta : float
        0 <= delta < 1.
    rho : float or None
        The zCDP parameter when the claim was stated as rho-zCDP.
    kind : {"generic", "gaussian"}
        ``gaussian`` when the claim comes from a Gaussian / GDP analysis (then
        the GDP test is valid for it); ``generic`` otherwise.
    mu : float or None
        The GDP parameter a Gaussian claim implies: sqrt(2 rho), or the
        largest mu whose privacy profile gives (epsilon, delta).
    """

    epsilon: float
    delta: float
    rho: float | None = None
    kind: str = "generic"
    mu: float | None = None
    conversion: str = "as stated"

    @classmethod
    def from_epsilon(cls, epsilon: float, delta: float, kind: str = "generic") -> "Claim":
        """An (epsilon, delta) claim.

        Raises
        ------
        UsageError
            epsilon <= 0, delta outside [0, 1), unknown kind, or a Gaussian
            claim with delta = 0 (no Gaussian mechanism is pure DP).
        """
        from privaudit.audit.bounds import gdp_mu_from_eps
        _check_claim(epsilon, delta, kind)
        mu = None
        if kind == "gaussian":
            if delta <= 0:
                raise UsageError("a Gaussian claim needs `--delta` > 0 (no Gaussian mechanism is pure DP).")
            mu = gdp_mu_from_eps(epsilon, delta)
        return cls(float(epsilon), float(delta), None, kind, mu, "as stated")

    @classmethod
    def from_rho(cls, rho: float, delta: float, kind: str = "gaussian") -> "Claim":
        """A rho-zCDP claim, compared at ``delta`` through the tight CKS conversion.

        Raises
        ------
        UsageError
            rho <= 0 or delta outside (0, 1).
        """
        if not (isinstance(rho, (int, float)) and math.isfinite(rho) and rho > 0):
            raise UsageError(f"`--claim-rho` must be > 0. Found {rho}.")
        if not 0 < delta < 1:
            raise UsageError(f"`--delta` must lie in (0, 1) for a rho claim. Found {delta}.")
        if kind not in CLAIM_KINDS:
            raise UsageError(f"`--claim-kind` must be one of {CLAIM_KINDS}. Found {kind!r}.")
        from privaudit.privacy.accounting import zcdp_to_dp
        eps = zcdp_to_dp(rho, delta)
        eps = float(eps[0] if isinstance(eps, tuple) else getattr(eps, "epsilon", eps))
        mu = math.sqrt(2 * rho) if kind == "gaussian" else None
        return cls(eps, float(delta), float(rho), kind, mu, "zCDP -> (eps, delta): Canonne-Kamath-Steinke 2020")

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "rho": self.rho, "kind": self.kind,
                "mu": self.mu, "conversion": self.conversion}


def _check_claim(epsilon, delta, kind):
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise UsageError(f"`--claim-epsilon` must be > 0. Found {epsilon}.")
    if not (isinstance(delta, (int, float)) and 0 <= delta < 1):
        raise UsageError(f"`--delta` must lie in [0, 1). Found {delta}.")
    if kind not in CLAIM_KINDS:
        raise UsageError(f"`--claim-kind` must be one of {CLAIM_KINDS}. Found {kind!r}.")


def is_batched(fn: Callable) -> bool:
    """True when ``fn`` accepts a keyword ``n_runs`` (vectorized runs)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "n_runs" in params


class FileFunction:
    """A picklable reference to ``NAME`` in a Python file (``FILE.py:NAME``).

    Loaded lazily in whichever process calls it, so it can be sent to worker
    processes started with ``spawn``.
    """

    def __init__(self, ref: str):
        path, sep, name = ref.rpartition(":")
        if not sep or not path.endswith(".py") or not name.isidentifier():
            raise UsageError(f"expected FILE.py:NAME. Found {ref!r}.")
        self.path, self.name = str(Path(path).resolve()), name
        self._fn = None
        self.load()  # fail early, in the parent, with a located message

    def load(self) -> Callable:
        if self._fn is None:
            p = Path(self.path)
            if not p.is_file():
                raise UsageError(f"no such file {p} (from FILE.py:NAME {self.name}).")
            mod_name = "privaudit_user_" + p.stem
            spec = importlib.util.spec_from_file_location(mod_name, p)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = mod
            try:
                spec.loader.exec_module(mod)
            except Exception as e:
                raise UsageError(f"cannot import {p}: {type(e).__name__}: {e}") from None
            fn = getattr(mod, self.name, None)
            if not callable(fn):
                raise UsageError(f"{p} has no callable named {self.name!r}.")
            self._fn = fn
        return self._fn

    def __getstate__(self):
        return {"path": self.path, "name": self.name, "_fn": None}

    def __call__(self, *args, **kwargs):
        return self.load()(*args, **kwargs)

    def __repr__(self):
        return f"{self.path}:{self.name}"


def flatten_runs(out, n: int) -> np.ndarray:
    """Outputs of n runs as a float64 matrix (n, d); checks the batch shape."""
    arr = np.asarray(out)
    if arr.ndim == 0 or arr.shape[0] != n:
        raise UsageError(f"a batched mechanism must return n_runs={n} runs on axis 0. Found shape {arr.shape}.")
    return arr.reshape(n, -1).astype(np.float64, copy=False)
