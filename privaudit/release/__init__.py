"""The private release of tabular count statistics: mechanism, manifest, on-disk artifact, behaviour value."""
