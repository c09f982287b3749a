"""privaudit: differentially private offline RL on sequential-decision logs.

Validate Parquet trajectory logs against a public domain spec, release
differentially private statistics of them, train offline policies (DP-APVI,
DP-VAPVI and their non-private baselines) and audit DP claims empirically.
"""

from privaudit.core.package_data import SampleData, sample_dir

__version__ = "0.1.0"

#: Version of every on-disk artifact format privaudit writes (release,
#: policy, audit report, summary). Readers refuse other versions.
FORMAT_VERSION = 1


def sample_data():
    """Paths of the sample data bundled with privaudit (both in a checkout and after ``pip install``).

    Returns
    -------
    SampleData
        A named tuple of ``pathlib.Path``: ``logs`` (20,000 simulated
        ICU-Sepsis stays under the clinicians' policy, Parquet), ``spec``
        (its domain spec, JSON), ``broken_logs`` and ``broken_spec`` (a
        deliberately broken log with hospital-style column names, for the
        validation examples).

    Examples
    --------
    >>> import privaudit
    >>> from privaudit.data.validate import validate_logs
    >>> from privaudit.core.spec import load_spec
    >>> s = privaudit.sample_data()
    >>> validate_logs(s.logs, load_spec(s.spec)).ok
    True
    """
    d = sample_dir()
    return SampleData(logs=d / "icu_sepsis_clinicians_20k.parquet", spec=d / "icu_sepsis_spec.json",
                      broken_logs=d / "broken_logs.parquet", broken_spec=d / "broken_spec.json")
