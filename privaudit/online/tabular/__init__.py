"""Tabular online explorers under joint DP: PUCB and its non-private twin, with their constants."""
