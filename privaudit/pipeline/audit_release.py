"""The pipeline's audit stage: the tabular release, audited at its claimed budget.

A thin call of the auditor's built-in ``release`` adapter
(:class:`privaudit.audit.mechanisms.release.ReleaseMechanism`), which runs the library's
own bounding, counting, noise plan and noise sampler on a public view of the
release (every cell the pair changes plus a few fixed public cells; see
docs/audit.md).

The pair depends on no real unit and reads nothing of the logs: D0 = logs + u*,
D1 = logs + v*, where u* and v* are synthetic units built from the spec alone
(:func:`privaudit.audit.synthetic_pairs.synthetic_pair`: k full-length episodes each
on disjoint cells; one repeated cell for a stationary release), so the pair
attains the release's declared sensitivity. The release's exact statistics
are sums over units after per-unit bounding and its noise is drawn
independently of their values, so the trade-off curve of (logs + u*, logs + v*)
is the same for every logs (a shift of both sides by the exact statistics
of the logs, a bijection); the audit runs it with the empty baseline. Its
verdict, bound and figure are therefore functions of the spec, the manifest
and the audit's own noise only, and may leave with the release
(tests/pipeline/test_pipeline_audit.py checks them identical on two neighbouring logs).
"""

from __future__ import annotations

import math

from privaudit.audit.synthetic_pairs import synthetic_pair
from privaudit.core.errors import ArtifactError
from privaudit.core.spec import DomainSpec
from privaudit.release.manifest import ReleaseManifest
from privaudit.audit import AuditSettings, run_audit
from privaudit.audit.mechanisms.release import ReleaseMechanism


def audit_release(spec: DomainSpec, manifest: ReleaseManifest, *, delta: float, trials: int,
                  seed: int | None = None, progress: bool | None = None, budget=None):
    """Audit the release that ``manifest`` describes against its own claim (rho-zCDP at ``delta``),
    on the synthetic pair (no private data is read).

    Parameters
    ----------
    spec : DomainSpec
        The spec the release was made under.
    manifest : ReleaseManifest
        The release manifest: its ``guarantee.rho``, ``mechanism``, ``noise``
        and ``domain.stationary`` configure the audited mechanism.
    delta : float
        delta at which the claimed epsilon is compared (the pipeline's).
    trials : int
        Runs per side (selection + evaluation), >= 20.
    seed : int or None
        Seeds the audit's noise and split (None: OS entropy).
    progress : bool or None
        Progress bar on stderr (default: only on a terminal).
    budget : privaudit.privacy.budget.Budget, optional
        The budget the release was made with (the pipeline's release part,
        already resolved); default: resolved from the manifest's rho.

    Returns
    -------
    privaudit.audit.AuditReport
        With rounded Gaussian noise (the pipeline's) the GDP test is added to
        the generic one: the release is a post-processing of continuous
        Gaussian mechanisms, so it is sqrt(2 rho)-GDP; the report labels a
        GDP-derived bound (``method.epsilon_lower_bound_from``). Exact or
        Laplace noise: the generic test only (a discrete Gaussian is rho-zCDP
        but not sqrt(2 rho)-GDP).

    Raises
    ------
    ArtifactError
        If the adapter's noise plan differs from the scales the manifest
        records (the audit would not test what was released).
    UsageError
        Bad trials.
    """

    stationary = manifest.domain.stationary
    mech = ReleaseMechanism(spec, delta=float(delta), mechanism=manifest.mechanism, stationary=stationary,
                            noise=manifest.noise,
                            **({"budget": budget} if budget is not None else {"rho": manifest.rho}))
    for fam, p in manifest.families.items():
        planned = getattr(mech.release.families.get(fam), "scale", None)
        if planned is None or not math.isclose(planned, float(p.noise_scale), rel_tol=1e-12):
            raise ArtifactError(f"the audit's noise plan for {fam} ({planned}) differs from the release's "
                                f"noise_scale {p.noise_scale}: the audit would not test the release.")
    pair = synthetic_pair(spec, pooled=stationary)
    # the GDP test only where it is valid: continuous Gaussian noise, rounded (post-processing of the
    # Gaussian mechanism); exact (discrete Gaussian) or Laplace noise gets the generic test
    gdp = not mech.budget.family.pure and mech.noise_mode == "rounded"
    return run_audit(mech, claim=mech.claim(kind="gaussian" if gdp else "generic"), pair=pair, trials=int(trials), seed=seed,
                     progress=progress, settings=AuditSettings(n_jobs=1))
