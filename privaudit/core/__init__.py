"""The core layer: errors, the domain spec, JSON Schemas, atomic writes, output locks and checks, JSON and NumPy
file helpers, formatting, progress, the algorithm registry."""
