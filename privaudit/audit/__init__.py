"""Empirical DP auditing: neighbouring pairs, attacks, valid epsilon lower bounds.

Entry point: :func:`run_audit`. See ``docs/audit.md``.
"""

from privaudit.audit.claim import Claim
from privaudit.audit.explicit_pairs import check_neighbours, load_pair
from privaudit.audit.inputs import input_pair, sequence_output
from privaudit.audit.neighbours import make_pair
from privaudit.audit.pairs import NeighbouringPair
from privaudit.audit.report import AuditReport, load_report
from privaudit.audit.runner import AuditSettings, FixedEvents, run_audit

__all__ = ["AuditReport", "AuditSettings", "Claim", "FixedEvents", "NeighbouringPair", "check_neighbours",
           "input_pair", "load_pair", "load_report",
           "make_pair", "run_audit", "sequence_output"]
