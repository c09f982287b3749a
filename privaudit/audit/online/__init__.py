"""Auditing online explorers' joint-DP claims: neighbouring user streams, the explorer as a mechanism, a catalogue."""
