"""The audit adapters by ``privaudit audit --mechanism`` name, built from the algorithm registry.

``ADAPTERS`` maps ``release`` and every private offline learner of
``privaudit.core.registry`` to its adapter class, read from the registry each
time it is asked (a learner registered after this module was imported is
there). A learner names no adapter of its own (the import layers forbid
learners importing the auditor): :func:`adapter_for` builds it from the
class, as the built-in adapter of the learner's family and ``reads`` with
the class as ``learner_class``; a learner whose noise is not one of these
declares ``audit_adapter = "module:Class"`` instead.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping

from privaudit.audit.mechanisms.dp_apvi import DPAPVIMechanism
from privaudit.audit.mechanisms.dp_pbb import DPPBBMechanism
from privaudit.audit.mechanisms.dp_vapvi import DPVAPVIMechanism
from privaudit.audit.mechanisms.release import ReleaseMechanism
from privaudit.core import registry
from privaudit.core.errors import UsageError

#: The built-in adapter of a private learner by (family, reads): a release post-processor (DP-APVI), a tabular
#: learner on the logs with DP-PBB's noise plan, a linear learner with DP-VAPVI's 5H statistics.
BASES = {("tabular", "release"): DPAPVIMechanism, ("tabular", "logs"): DPPBBMechanism,
         ("linear", "logs"): DPVAPVIMechanism}


def adapter_for(name: str) -> type:
    """The audit adapter class of the private offline learner ``name``.

    Its ``audit_adapter`` (``"module:Class"``) if the class declares one;
    else the built-in adapter of its family and ``reads`` (:data:`BASES`):
    that adapter itself when its ``learner_class`` is the learner's class,
    otherwise a subclass of it with ``name`` and ``learner_class`` set (built
    once per class).

    Raises
    ------
    UsageError
        ``name`` is not a registered private offline learner, or no adapter fits it.
    """
    entry = registry.get(name)
    if entry.family not in registry.OFFLINE or not entry.private:
        raise UsageError(f"{name!r} is not a private offline learner: it has no audit adapter.")
    return _adapter(name, entry.load())


@functools.cache
def _adapter(name: str, cls: type) -> type:
    declared = getattr(cls, "audit_adapter", None)
    if declared is not None:
        module, _, attr = declared.partition(":")
        return getattr(importlib.import_module(module), attr)
    base = BASES.get((registry.get(name).family, cls.reads))
    if base is None:
        raise UsageError(f"no audit adapter fits learner {name!r} ({registry.get(name).family}, reads "
                         f"{cls.reads!r}): declare `audit_adapter = \"module:Class\"` on its class.")
    if base.learner_class is cls and base.name == name:
        return base
    return type(f"{cls.__name__}Mechanism", (base,), {
        "name": name, "learner_class": cls, "__module__": __name__,
        "__doc__": f"{base.__doc__.splitlines()[0]} (adapter of {name}, built from its learner class)."})


class _Adapters(Mapping):
    """``--mechanism`` name -> adapter class, read from the registry when asked (:data:`ADAPTERS`)."""

    def __getitem__(self, name: str) -> type:
        if name == "release":
            return ReleaseMechanism
        if name not in self.names():
            raise KeyError(name)
        return adapter_for(name)

    def __iter__(self):
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    @staticmethod
    def names() -> tuple[str, ...]:
        """``release`` then the private offline learners, in registry order."""
        return ("release",) + registry.names(family=registry.OFFLINE, private=True)


#: --mechanism names of the CLI -> adapter class
ADAPTERS = _Adapters()
