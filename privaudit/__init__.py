"""privaudit: differentially private offline RL on sequential-decision logs.

Validate Parquet trajectory logs against a public domain spec, release
differentially private statistics of them, train offline policies (DP-APVI,
DP-VAPVI and their non-private baselines) and audit DP claims empirically.
"""

__version__ = "0.1.0"

#: Version of every on-disk artifact format privaudit writes (release,
#: policy, audit report, summary). Readers refuse other versions.
FORMAT_VERSION = 1
