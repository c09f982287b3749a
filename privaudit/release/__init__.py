"""The private release of tabular count statistics: mechanism, size checks, manifest, on-disk artifact, behaviour value."""
