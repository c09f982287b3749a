"""The core layer: errors, the domain spec, JSON Schemas, files, formatting, progress, the algorithm registry."""
