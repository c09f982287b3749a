"""The main job end to end: ``privaudit pipeline`` (validate -> release -> train -> evaluate -> audit).

Entry points: :func:`run_pipeline` (keyword arguments) and :func:`run_pipeline_config` (one
:class:`PipelineConfig`). See docs/pipeline.md.
"""

from privaudit.pipeline.config import PipelineConfig
from privaudit.pipeline.report import load_summary
from privaudit.pipeline.run import run_pipeline, run_pipeline_config

__all__ = ["run_pipeline", "run_pipeline_config", "PipelineConfig", "load_summary"]
