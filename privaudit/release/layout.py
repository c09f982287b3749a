"""File names of a release folder (shared by the mechanism's manifest and the artifact reader)."""

#: The manifest of a release folder.
MANIFEST = "manifest.json"
#: One Parquet table per released family.
FILES = {"visits": "visits.parquet", "transitions": "transitions.parquet", "rewards": "rewards.parquet"}


def action_columns(A: int) -> list[str]:
    """The count columns of ``transitions.parquet`` (format version 3): ``action_<a>`` for a = 0..A-1."""
    return [f"action_{a}" for a in range(A)]
