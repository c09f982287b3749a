"""The data path (polars): read Parquet logs, validate them against the spec, bound each unit's contribution, count."""
