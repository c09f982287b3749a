"""The built-in audit adapters by ``privaudit audit --mechanism`` name.

A private learner registered in ``privaudit.core.registry`` needs an adapter
here, under the same name (a test checks that every private algorithm has one).
"""

from __future__ import annotations

from privaudit.audit.mechanisms.dp_apvi import DPAPVIMechanism
from privaudit.audit.mechanisms.dp_pbb import DPPBBMechanism
from privaudit.audit.mechanisms.dp_vapvi import DPVAPVIMechanism
from privaudit.audit.mechanisms.release import ReleaseMechanism

#: --mechanism names of the CLI -> adapter class
ADAPTERS = {"release": ReleaseMechanism, "dp-apvi": DPAPVIMechanism, "dp-pbb": DPPBBMechanism,
              "dp-vapvi": DPVAPVIMechanism}
