"""How the auditor calls a mechanism: the mechanism protocol and the user-code boundary.

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
  check (docs/audit.md, Background: the gray-box check);
* ``noise() -> dict[name, {"mechanism": "gaussian"|"laplace", "scale": ..}]``:
  lets the gray-box check say how much privacy a sensitivity excess costs;
* ``attack_scores(pair) -> list[(name, fn)]``: extra fixed scores
  ``fn(outputs: (n, *shape)) -> (n,)`` (e.g. "the policy acts as the canary").
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from privaudit.core.errors import Terminated, UsageError, UserCodeError


def is_batched(fn: Callable) -> bool:
    """True when ``fn`` accepts a keyword ``n_runs`` (vectorized runs)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "n_runs" in params


#: The optional hooks of this module's docstring. A ``FILE.py:NAME`` mechanism (:class:`FileMechanism`)
#: has them honoured as from Python, each call behind the user-code boundary (the CLI names them: :func:`hooks_of`).
HOOKS = ("make_pair", "prepare", "exact_statistics", "declared_sensitivity", "noise", "attack_scores")
#: Further attributes a :class:`FileMechanism` forwards: the report's words for an output cell
#: (:class:`privaudit.audit.inputs.SequenceOutput`). ``SELF_CONTAINED`` is never forwarded: user code is
#: never privaudit's own mechanism, so its reports are never shareable.
FORWARDED = HOOKS + ("cell_name",)


def hooks_of(obj) -> list[str]:
    """The hooks of :data:`HOOKS` that ``obj`` defines (callable attributes), in that order."""
    return [h for h in HOOKS if callable(getattr(obj, h, None))]


#: How privaudit calls user code, per role (shown when a call fails).
USER_SIGNATURES = {
    "mechanism": "fn(logs: polars.DataFrame, rng: numpy.random.Generator[, n_runs: int]) -> ndarray "
                 "(n_runs runs stacked on axis 0 when it takes n_runs)",
    "score": "fn(outputs: ndarray (n, *shape)) -> ndarray (n,)",
}


class FileFunction:
    """A picklable reference to ``NAME`` in a Python file (``FILE.py:NAME``).

    Loaded lazily in whichever process calls it, so it can be sent to worker
    processes started with ``spawn``. This is the boundary between privaudit
    and user code: loading the file and every call go through it, and any
    exception the user code raises (a wrong signature and ``sys.exit`` included;
    only KeyboardInterrupt and privaudit's ``Terminated`` pass through) becomes a
    :class:`~privaudit.core.errors.UserCodeError` naming ``FILE.py:NAME``, the
    exception type and message (no traceback at the CLI).

    Parameters
    ----------
    ref : str
        ``FILE.py:NAME``, as the user gave it (kept for messages).
    role : {"mechanism", "score"} or None
        When given, the signature is checked on load against how privaudit
        calls that role (``USER_SIGNATURES``): a mechanism must accept
        ``(logs, rng)``, a score ``(outputs)``.

    Raises
    ------
    UsageError
        ``ref`` is not of the form FILE.py:NAME.
    UserCodeError
        No such file, the file fails to import, NAME is missing or not
        callable, or its signature cannot take the role's arguments.
    """

    def __init__(self, ref: str, role: str | None = None):
        path, sep, name = ref.rpartition(":")
        if not sep or not path.endswith(".py") or not name.isidentifier():
            raise UsageError(f"expected FILE.py:NAME. Found {ref!r}.")
        if role is not None and role not in USER_SIGNATURES:
            raise ValueError(f"role must be one of {sorted(USER_SIGNATURES)}; got {role!r}")
        self.ref, self.role = ref, role
        self.path, self.name = str(Path(path).resolve()), name
        self._fn = None
        self.load()  # fail early, in the parent, with a located message

    def _expected(self) -> str:
        return f" A {self.role} is called as {USER_SIGNATURES[self.role]}." if self.role else ""

    def load(self) -> Callable:
        if self._fn is None:
            p = Path(self.path)
            if not p.is_file():
                raise UserCodeError(f"{self.ref}: no such file {p}.")
            mod_name = "privaudit_user_" + p.stem
            spec = importlib.util.spec_from_file_location(mod_name, p)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException as e:  # SystemExit too: user code never sets privaudit's exit code
                _reraise_control(e)
                raise UserCodeError(f"{self.ref}: cannot import {p}: {type(e).__name__}: {e}") from None
            fn = getattr(mod, self.name, None)
            if not callable(fn):
                raise UserCodeError(f"{self.ref}: {p} has no callable named {self.name!r}.")
            if self.role is not None:
                self._check_signature(fn)
            self._fn = fn
        return self._fn

    def _check_signature(self, fn: Callable) -> None:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # builtins without a signature: checked at the first call
            return
        try:
            sig.bind(None, None) if self.role == "mechanism" else sig.bind(None)
        except TypeError as e:
            raise UserCodeError(f"{self.ref}: wrong signature {self.name}{sig} ({e}).{self._expected()}") from None

    def __getstate__(self):
        return {"ref": self.ref, "role": self.role, "path": self.path, "name": self.name, "_fn": None}

    def callee(self) -> Callable:
        """The callable a call runs (the loaded ``NAME``)."""
        return self.load()

    def guarded(self, fn: Callable, what: str, *args, **kwargs):
        """``fn(*args, **kwargs)`` behind the user-code boundary: an exception becomes a
        :class:`~privaudit.core.errors.UserCodeError` naming ``what`` and how privaudit calls this role
        (Ctrl-C and SIGTERM pass)."""
        return self._boundary(fn, what, args, kwargs, hint=True)

    def _boundary(self, fn: Callable, what: str, args, kwargs, hint: bool):
        try:
            return fn(*args, **kwargs)
        except BaseException as e:  # user code: report it, without the traceback (sys.exit included)
            _reraise_control(e)
            raise UserCodeError(f"{what} raised {type(e).__name__}: {e}."
                                + (self._expected() if hint else "")) from None

    def __call__(self, *args, **kwargs):
        return self.guarded(self.callee(), self.ref, *args, **kwargs)

    def __repr__(self):
        return f"{self.path}:{self.name}"


class FileMechanism(FileFunction):
    """A ``FILE.py:NAME`` mechanism whose hooks are honoured as when the object is passed from Python.

    ``hasattr(m, hook)`` is true for each hook of :data:`FORWARDED` that the
    user's object defines, and calling it calls the user's method behind the
    same boundary as the mechanism itself (an exception in it becomes a
    :class:`~privaudit.core.errors.UserCodeError` naming ``FILE.py:NAME.hook``).
    ``prepare(d, d_prime)`` returns a FileMechanism bound to the pair: it
    calls the user's ``prepare`` in whichever process loads it (worker
    processes too: it stays picklable, carrying the pair) and forwards to
    the prepared object.

    Parameters
    ----------
    ref : str
        ``FILE.py:NAME``.
    bound : (d, d_prime), optional
        The pair ``prepare`` was called with (set by :meth:`prepare`).

    Raises
    ------
    UsageError, UserCodeError
        As :class:`FileFunction` (role "mechanism").
    """

    def __init__(self, ref: str, bound: tuple | None = None):
        self._bound, self._prepared = bound, None
        super().__init__(ref, role="mechanism")

    def __getstate__(self):
        return {**super().__getstate__(), "_bound": self._bound, "_prepared": None}

    def callee(self) -> Callable:
        """The user's object, prepared for the bound pair when ``prepare`` was called."""
        if self._bound is None:
            return self.load()
        if self._prepared is None:
            self._prepared = self._boundary(self.load().prepare, f"{self.ref}.prepare", self._bound, {}, hint=False)
        return self._prepared

    def __getattr__(self, name: str):
        # only the hooks, looked up on the user's object: other names (pickle's, privaudit's own
        # markers such as SELF_CONTAINED) are not forwarded
        if name not in FORWARDED or name.startswith("_"):
            raise AttributeError(name)
        if name == "prepare":
            if self._bound is not None or not callable(getattr(self.load(), "prepare", None)):
                raise AttributeError(name)
            return lambda d, d_prime: FileMechanism(self.ref, bound=(d, d_prime))
        hook = getattr(self.callee(), name, None)
        if not callable(hook):
            raise AttributeError(name)
        return lambda *a, **k: self._boundary(hook, f"{self.ref}.{name}", a, k, hint=False)


def _reraise_control(e: BaseException) -> None:
    """Re-raise what must cross the user-code boundary unchanged: Ctrl-C and privaudit's SIGTERM."""
    if isinstance(e, (KeyboardInterrupt, Terminated)):
        raise e


def numeric_output(out, who: str) -> np.ndarray:
    """``out`` as a real (bool, integer or float) numpy array, else a located error.

    Parameters
    ----------
    out : array-like
        What a mechanism or score returned.
    who : str
        Names the code in the message (``FILE.py:NAME`` for user code).

    Raises
    ------
    UserCodeError
        ``out`` is None, ragged, or not real numbers (strings, objects, complex).
    """
    if out is None:
        raise UserCodeError(f"{who} returned None; it must return a numeric array.")
    try:
        arr = np.asarray(out)
    except (TypeError, ValueError) as e:  # ragged nested lists
        raise UserCodeError(f"{who} returned a {type(out).__name__} that is not an array: {e}") from None
    if arr.dtype.kind not in "biuf":
        raise UserCodeError(f"{who} must return real numbers; it returned a {type(out).__name__} of dtype "
                            f"{arr.dtype} (shape {arr.shape}).")
    return arr


def flatten_runs(out, n: int, who: str = "the mechanism") -> np.ndarray:
    """Outputs of n runs as a float64 matrix (n, d); checks the type and the batch shape.

    Raises
    ------
    UserCodeError
        Not a real-valued array, not ``n`` runs on axis 0, or no number per run.
    """
    arr = numeric_output(out, who)
    if arr.ndim == 0 or arr.shape[0] != n:
        raise UserCodeError(f"{who}: a batched mechanism must return n_runs={n} runs on axis 0. "
                            f"Found shape {arr.shape}.")
    if n and arr.size == 0:
        raise UserCodeError(f"{who} returned an empty output per run (shape {arr.shape}): there is nothing to "
                            "audit. Return at least one number per run.")
    return arr.reshape(n, -1).astype(np.float64, copy=False)
