"""Offline linear-MDP learners: PEVI, VAPVI and DP-VAPVI (Qiao & Wang 2023, Algorithm 2).

See docs/linear.md. ``train_from_logs`` is the entry point used by
``privaudit train --algo pevi|vapvi|dp-vapvi``.
"""

from privaudit.learners.linear.data import LinearData, StepData
from privaudit.learners.linear.estimators import DPVAPVI, PEVI, VAPVI
from privaudit.learners.linear.logs import plan_dp_vapvi, train_from_logs
from privaudit.learners.linear.providers import FiniteFeatures, RowFeatures

__all__ = ["DPVAPVI", "PEVI", "VAPVI", "FiniteFeatures", "LinearData", "RowFeatures", "StepData", "plan_dp_vapvi",
           "train_from_logs"]

