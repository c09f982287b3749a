"""Mechanisms the auditor can run: privaudit's own (release, DP-APVI, DP-PBB, DP-VAPVI) and a catalogue of correct and broken ones."""
