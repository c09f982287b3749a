"""The main job end to end: ``privaudit pipeline`` (validate -> release -> train -> evaluate -> audit).

Entry point: :func:`run_pipeline`. See docs/pipeline.md.
"""

from privaudit.pipeline.report import load_summary
from privaudit.pipeline.run import run_pipeline

__all__ = ["run_pipeline", "load_summary"]
