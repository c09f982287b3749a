"""Tabular offline learners: VE, APVI, DP-APVI, DP-PBB, and the pessimistic value iteration they share."""
