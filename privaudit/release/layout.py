"""File names of a release folder (shared by the mechanism's manifest and the artifact reader)."""

#: The manifest of a release folder.
MANIFEST = "manifest.json"
#: One Parquet table per released family.
FILES = {"visits": "visits.parquet", "transitions": "transitions.parquet", "rewards": "rewards.parquet"}
