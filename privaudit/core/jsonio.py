"""JSON output of NumPy values (without importing NumPy: the CLI loads this for every command)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def json_default(o: Any):
    """``json.dumps(..., default=json_default)``: numpy integers, floats and arrays as JSON numbers and lists;
    a read-only mapping (a stated guarantee, ``privaudit.core.artifact.Guarantee``) as a JSON object.

    Raises
    ------
    TypeError
        Any other object (as ``json`` does).
    """
    # duck-typed (numpy's scalars have .item(), its arrays .tolist()) so that this module, which the
    # CLI loads for every command, does not import numpy
    kind = type(o).__module__.split(".")[0]
    if kind == "numpy" and hasattr(o, "tolist"):
        return o.tolist()  # arrays -> nested lists, scalars -> int / float / bool
    if isinstance(o, Mapping):
        return dict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
