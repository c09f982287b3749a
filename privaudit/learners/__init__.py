"""Offline learners: tabular (VE, APVI, DP-APVI, DP-PBB) and linear (PEVI, VAPVI, DP-VAPVI), and the policy artifact."""
