"""Anyone's mechanism (issue 30): inputs of any type, add/remove pairs, variable-length outputs, the learned
attack, the "useless pair" warning, run-count guidance and the event named in words.

Statistical tests use fixed seeds. A correct mechanism is flagged by an audit with probability at most
1 - confidence = 0.05 (the Clopper-Pearson bounds' level), so each "not flagged" assertion at its seed had at
most that chance of failing when written; the broken mechanisms' bounds sit far above their claims.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from privaudit.audit import AuditSettings, Claim, check_neighbours, run_audit
from privaudit.audit.attacks import Candidate
from privaudit.audit.explain import cell_namer, describe_event
from privaudit.audit.guidance import evaluation_runs_needed, trials_needed, visible_excess
from privaudit.audit.inputs import input_pair, sequence_output
from privaudit.core.errors import UsageError, UserCodeError

DOC = Path(__file__).resolve().parents[2] / "docs" / "audit.md"
NO_GRAYBOX = AuditSettings(graybox=False)


def _doc_example(title: str) -> dict:
    """Run the python block under ``### Worked example: <title>`` of docs/audit.md; its namespace."""
    text = DOC.read_text()
    start = text.index(f"### Worked example: {title}")
    block = re.search(r"```python\n(.*?)```", text[start:], re.S).group(1)
    ns: dict = {}
    exec(compile(block, f"docs/audit.md ({title})", "exec"), ns)  # noqa: S102 - the documented example
    return ns


def test_worked_example_laplace_of_a_count_add_remove():
    ns = _doc_example("the Laplace of a count")
    ok, bad = ns["ok"], ns["bad"]
    assert not ok.violation and 0.5 < ok.epsilon_lower_bound <= 1.0, ok  # tight below the claim
    assert bad.violation and bad.epsilon_lower_bound > 1.5, bad            # true epsilon 2
    pair = bad.data["neighbouring_pair"]
    assert pair["relation"] == "add/remove" and pair["kind"] == "custom" and pair["added_units"] == 1
    assert not bad.data["shareable"]
    bad.validate()  # the schema takes the add/remove relation and the custom kind
    assert "decided by: outputs whose value is at most 3 (more likely under D), on tables of 4 and 5 rows" in \
        " ".join(bad.data["messages"]) and "(add/remove neighbours)" in " ".join(bad.data["messages"])


def test_worked_example_hand_written_svt_answered_prefix():
    ns = _doc_example("a hand-written sparse vector")
    ok, bad = ns["ok"], ns["bad"]
    assert not ok.violation, ok
    assert bad.violation and bad.epsilon_lower_bound > 2, bad  # Algorithm 5: supports differ
    assert bad.data["method"]["output_shape"] == [11]          # [length, 10 elements]
    assert "element" in bad.data["chosen_event"]["explanation"]
    assert "(1 x5, 0 x5) vs (0 x5, 1 x5)" in \
        bad.data["neighbouring_pair"]["inputs"]


def _shared_sign(x, rng, n_runs=1):
    """8 pairs of cells sharing one Laplace draw, the second with the sign x read off the data: the
    marginal laws do not move with x, their correlation does (a leak no fixed score of the menu sees)."""
    z = rng.laplace(0.0, 1.0, (n_runs, 8))
    a = z + 0.3 * rng.laplace(0.0, 1.0, (n_runs, 8))
    return np.concatenate([a, float(x) * z + 0.3 * rng.laplace(0.0, 1.0, (n_runs, 8))], axis=1)


def _independent(x, rng, n_runs=1):
    """The correct twin: the second block drawn afresh (the same law whatever x)."""
    return np.concatenate([rng.laplace(0.0, 1.0, (n_runs, 8)) + 0.3 * rng.laplace(0.0, 1.0, (n_runs, 8))
                           for _ in range(2)], axis=1)


def test_learned_attack_flags_a_correlation_leak_the_fixed_scores_miss():
    """On main (fixed scores only) this audit finds eps_lb 0.0 at 2 000 runs per side; the learned attack
    (pairwise products of the cells) certifies about 5.4 against the claim 1."""
    pair = input_pair(1.0, -1.0)
    rep = run_audit(_shared_sign, pair=pair, claim=Claim.from_epsilon(1.0, 0.0), trials=2000, seed=1,
                    settings=NO_GRAYBOX)
    assert rep.violation and rep.epsilon_lower_bound > 3, rep
    assert rep.data["chosen_event"]["candidate"] == "learned_logistic"
    assert "learned classifier" in rep.data["chosen_event"]["explanation"]
    twin = run_audit(_independent, pair=pair, claim=Claim.from_epsilon(1.0, 0.0), trials=2000, seed=1,
                     settings=NO_GRAYBOX)
    assert not twin.violation and "learned_logistic" in twin.data["candidates"]


def _svt_bits(q, rng, n_runs=1, epsilon=0.5, c=1, query_scale=None):
    """Sparse vector, vectorised over runs (Lyu, Su & Li 2017): threshold noise Lap(2/eps), query noise
    Lap(4c/eps) (Algorithm 1, correct) or ``query_scale``; the answers after the c-th "above" are 0."""
    q = np.asarray(q, dtype=float)
    rho = rng.laplace(0.0, 2 / epsilon, (n_runs, 1))
    nu = rng.laplace(0.0, query_scale or 4 * c / epsilon, (n_runs, q.size))
    above = q + nu >= rho
    before = np.cumsum(above, axis=1) - above
    return (above & (before < c)).astype(float)


def _svt_no_cutoff(q, rng, n_runs=1):
    """Lyu, Su & Li 2017, Algorithm 6: query noise Lap(2/eps) and no cutoff (every answer released)."""
    q = np.asarray(q, dtype=float)
    rho = rng.laplace(0.0, 4.0, (n_runs, 1))
    return (q + rng.laplace(0.0, 4.0, (n_runs, q.size)) >= rho).astype(float)


HALF = ([1.0] * 5 + [0.0] * 5, [0.0] * 5 + [1.0] * 5)


def test_no_useless_pair_warning_for_svt_bits_that_differ_in_a_few_runs():
    """A correct SVT's bits are equal under the same draws in most runs; on main three equal runs made the
    audit say the pair does not change the output. Now: no warning, and none for an argmax either."""
    rep = run_audit(_svt_bits, pair=input_pair(*HALF), claim=Claim.from_epsilon(0.5, 0.0), trials=20_000, seed=3,
                    settings=NO_GRAYBOX)
    assert not rep.violation
    assert "warning" not in rep.data["neighbouring_pair"]
    assert not any("does not change" in m for m in rep.data["messages"]), rep.data["messages"]


def test_useless_pair_warning_states_its_total_variation_bound():
    def ignores_input(x, rng, n_runs=1):
        return rng.laplace(0.0, 1.0, (n_runs, 3))

    rep = run_audit(ignores_input, pair=input_pair([0.0, 1.0], [1.0, 0.0]), claim=Claim.from_epsilon(1.0, 0.0),
                    trials=2000, seed=0, settings=NO_GRAYBOX)
    warning = rep.data["neighbouring_pair"]["warning"]
    assert "identical outputs in all 300 probe runs" in warning and "total variation 0.0099" in warning


@pytest.mark.slow
def test_literature_svt_and_noisy_max_families_flagged_and_correct_twins_not():
    """Report-noisy-max that also returns its noisy value (all queries up by 1: the value's left tail has
    likelihood ratio e^(5/4) against the claim e^(1/2)) and Lyu et al.'s Algorithm 6 on the half pattern
    are flagged at 1e5 runs per side; the correct noisy max (index only) and Algorithm 1 are not."""
    claim = Claim.from_epsilon(0.5, 0.0)

    def noisy_max(q, rng, n_runs=1, value=True):
        y = np.asarray(q, dtype=float) + rng.laplace(0.0, 4.0, (n_runs, len(q)))
        i = y.argmax(axis=1)
        return np.stack([i, y[np.arange(n_runs), i]], axis=1) if value else i[:, None].astype(float)

    def index_only(q, rng, n_runs=1):
        return noisy_max(q, rng, n_runs, value=False)

    flagged = [run_audit(noisy_max, pair=input_pair([0.0] * 5, [1.0] * 5), claim=claim, trials=100_000, seed=4),
               run_audit(_svt_no_cutoff, pair=input_pair(*HALF), claim=claim, trials=100_000, seed=4)]
    assert all(r.violation for r in flagged), [r.epsilon_lower_bound for r in flagged]
    correct = [run_audit(index_only, pair=input_pair([1.0] * 5, [2.0, 0.0, 0.0, 0.0, 0.0]), claim=claim,
                         trials=100_000, seed=4),
               run_audit(_svt_bits, pair=input_pair(*HALF), claim=claim, trials=100_000, seed=4)]
    assert not any(r.violation for r in correct), [r.epsilon_lower_bound for r in correct]
    assert not any("does not change" in m for r in correct for m in r.data["messages"])


def test_table_without_unit_column_is_a_clear_error():
    d = pl.DataFrame({"patient": [1, 2], "x": [0.5, 1.5]})
    d2 = pl.DataFrame({"patient": [1, 3], "x": [0.5, 2.5]})
    with pytest.raises(UsageError, match=r"no privacy-unit column `unit_id` \(columns: patient, x\)"):
        input_pair(d, d2)
    with pytest.raises(UsageError, match="no privacy-unit column"):
        check_neighbours(d, d2)
    assert input_pair(d, d2, unit="patient").description["relation"] == "substitution"


def test_relations_are_checked_on_tables():
    d = pl.DataFrame({"unit_id": [1, 1, 2], "x": [0.0, 1.0, 2.0]})
    added = pl.concat([d, pl.DataFrame({"unit_id": [3], "x": [5.0]})])
    with pytest.raises(UsageError, match="replacing exactly one privacy unit"):
        input_pair(d, added)                                   # not a substitution
    with pytest.raises(UsageError, match="adding or removing exactly one"):
        input_pair(d, d, relation="add/remove")                # no unit added
    assert input_pair(added, d, relation="add/remove").description["removed_units"] == 1
    with pytest.raises(UsageError, match="relation"):
        input_pair(d, added, relation="replace-one")
    with pytest.raises(UsageError, match="same shape"):
        input_pair([1.0, 2.0], [1.0])


def test_sequence_output_encodes_without_padding_by_the_user():
    def prefix(q, rng):
        return [0.0] * int(q)

    mech = sequence_output(prefix, max_length=3)
    out = mech(2.0, np.random.default_rng(0))
    assert out.shape == (4,) and out[0] == 2 and list(out[1:3]) == [0.0, 0.0] and np.isnan(out[3])
    assert mech.cell_name(0) == "length" and mech.cell_name(2) == "element 1"
    with pytest.raises(UserCodeError, match="length 5, more than max_length=3"):
        mech(5.0, np.random.default_rng(0))

    def batched(q, rng, n_runs=1):
        return [[1.0] * k for k in rng.integers(0, 3, n_runs)]

    X = sequence_output(batched, max_length=2)(0.0, np.random.default_rng(0), n_runs=50)
    assert X.shape == (50, 3) and np.array_equal(np.isnan(X[:, 1:]).sum(axis=1), 2 - X[:, 0])


def test_a_variable_length_output_is_refused_with_the_way_to_audit_it():
    """Session 11: an SVT returning its answered prefix got "must return a fixed shape" and no hint that
    sequence_output exists; the error now names it."""
    def svt_prefix(q, rng):
        return [0.0] * int(rng.integers(1, 4))

    pair = input_pair([1.0, 0.0], [0.0, 1.0])
    with pytest.raises(UsageError, match="must return a fixed shape") as ei:
        run_audit(svt_prefix, pair=pair, claim=Claim.from_epsilon(1.0, 0.0), trials=200, seed=0)
    assert "sequence_output(fn, max_length)" in str(ei.value)


@pytest.mark.parametrize("batched", [False, True])
def test_an_empty_output_is_refused(batched):
    """Session 15: a mechanism returning no number per run (shape (0,), or (n, 0) batched) was audited and
    reported "no violation found" with the useless-pair warning; it is now refused before any bound."""
    if batched:
        def empty(q, rng, n_runs=1):
            return np.zeros((n_runs, 0))
    else:
        def empty(q, rng):
            return np.zeros(0)
    pair = input_pair([1.0, 0.0], [0.0, 1.0])
    with pytest.raises(UserCodeError, match="empty output"):
        run_audit(empty, pair=pair, claim=Claim.from_epsilon(1.0, 0.0), trials=200, seed=0)


def test_run_count_guidance():
    assert trials_needed(0.1, 0.1) < trials_needed(0.1, 0.05) < trials_needed(0.1, 0.1, fpr=1e-3)
    n = evaluation_runs_needed(1.0, 0.5)
    assert visible_excess(n, 1.0) <= 0.5 + 1e-3 and visible_excess(n // 2, 1.0) > 0.5
    with pytest.raises(UsageError):
        trials_needed(0.1, 0.0)


def test_below_claim_message_says_what_the_bound_does_not_show():
    rep = run_audit(_svt_bits, pair=input_pair(*HALF), claim=Claim.from_epsilon(0.5, 0.0), trials=2000, seed=5,
                    settings=NO_GRAYBOX)
    msg = next(m for m in rep.data["messages"] if m.startswith("what the bound shows"))
    assert "It does not show that it is at most the claimed 0.5" in msg and "trials_needed" in msg


def test_event_in_words_for_a_one_cell_threshold():
    w = np.array([0.0, 2.0, 0.0])
    cand = Candidate("mean_difference", lambda X: X @ w, {"kind": "linear"}, w)
    name = cell_namer((3,))
    assert describe_event(cand, 14.4, "+", name) == "outputs whose coordinate 1 is above 7.2 (more likely under D')"
    assert describe_event(cand, 14.4, "-", name) == "outputs whose coordinate 1 is at most 7.2 (more likely under D)"
    flat = Candidate("mean_difference", lambda X: X @ np.zeros(3), {"kind": "linear"}, np.zeros(3))
    said = describe_event(flat, 0.0, "+", name)  # session 11: "outputs whose weighted sum  is above 0"
    assert "  " not in said and said.startswith("outputs whose mean_difference score is above 0: every weight is 0")
    zero = Candidate("exact_zero", lambda X: X, {"kind": "indicator"}, np.array([0.0, 0.0, -0.3]))
    assert describe_event(zero, -0.1, "+", name).startswith("outputs whose coordinate 2 is not exactly 0")


def test_worked_example_third_party_opendp_laplace():
    """OpenDP's noise comes from OS entropy (not seedable): the outcomes are random. ``ok``'s eps_lb is a
    0.95 lower confidence bound on the true 1.0 (about 0.98 when measured, log-ratio sd ~0.02 at these
    counts): above 1.25 it would be > 10 sd off. ``bad``'s true epsilon 1.0 against a claim of 0.5 is
    flagged unless the bound falls 0.48 below its ~0.98 (> 20 sd)."""
    pytest.importorskip("opendp.prelude")
    ns = _doc_example("a third-party library")
    ok, bad = ns["ok"], ns["bad"]
    assert ns["epsilon"] == 1.0
    assert 0.5 < ok.epsilon_lower_bound <= 1.25, ok
    assert bad.violation and bad.epsilon_lower_bound > 0.5, bad
