#!/usr/bin/env sh
# Re-create the bundled 20,000-episode ICU-Sepsis clinicians' log and its spec.
# Same seed and same polars version -> byte-identical Parquet file; the spec is byte-identical.
# The two files are removed first: the committed Parquet predates simulate's logs mark, so
# `--overwrite` (which replaces only files simulate marked) would refuse it.
set -e
cd "$(dirname "$0")/.."
rm -f sample_data/icu_sepsis_clinicians_20k.parquet sample_data/icu_sepsis_spec.json
privaudit simulate icu-sepsis --episodes 20000 --behaviour clinicians --seed 2026 \
    --out sample_data/icu_sepsis_clinicians_20k.parquet \
    --spec-out sample_data/icu_sepsis_spec.json --dataset-id icu-sepsis-sample
