"""Golden suppression pattern: which figures a fixed table withholds, pinned.

The complementary-suppression heuristic (the release method: elimination, audit-and-repair, pruning) is
deterministic: the same counts give the same pattern. This test fixes a small but non-trivial table (built in
`tests/support/golden_pattern.py`) -- a
16 x 16 grid of 500 m cells with 1 km and 2 km parents and the bucket total, three weekly buckets, k = 5, two
structural-zero cells, counted once as `presence` (EQ relations) and once as `visitors` (UNION relations) --
and compares every withheld figure (level, area, bucket, primary or secondary) with `tests/golden/suppression_pattern.csv`.
A change to the heuristic (costs, tie-breaks, sweep rules, repair choice) therefore shows up as a diff
of that file in review instead of passing silently.

The counts come from Python's `random.Random(seed).random()`, whose sequence the standard library keeps
stable across versions, so the input never moves with numpy.

Regenerating the golden file is a deliberate act, never automatic:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_golden_pattern.py

writes the file from the current code (the test then reports itself skipped, so a run with the variable
set never counts as a pass); review the diff (`git diff tests/golden/`) and commit it with the change
that explains it. Without the variable a missing or different file fails the test.
"""

from __future__ import annotations

import csv
import os

import pandas as pd
import pytest
from support.golden_pattern import BUCKETS, GOLDEN, ZEROS, pattern, render


@pytest.mark.slow
def test_suppression_pattern_matches_golden():
    rows = [*pattern("presence"), *pattern("visitors")]
    text = render(rows)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
        pytest.skip(f"UPDATE_GOLDEN=1: wrote {len(rows)} withheld figures to {GOLDEN}; review `git diff` and commit")
    assert GOLDEN.exists(), f"{GOLDEN} is missing: create it deliberately with UPDATE_GOLDEN=1 (see this module)"
    expected = GOLDEN.read_text()
    if text != expected:
        old = set(expected.splitlines()[1:])
        new = set(text.splitlines()[1:])
        gone, added = sorted(old - new), sorted(new - old)
        pytest.fail(
            f"the suppression pattern changed: {len(gone)} rows no longer withheld as pinned, "
            f"{len(added)} new; first gone {gone[:5]}, first new {added[:5]}. If the change is "
            "intended, regenerate with UPDATE_GOLDEN=1 and commit the reviewed diff."
        )


def test_golden_table_is_non_trivial():
    """Guards the fixture itself: primaries at several levels in every bucket under both measures,
    secondaries under presence, and the structural zeros are never withheld (they are published as 0).
    Visitors needs no secondary here since elimination + pruning (the release method, `ProtectionMethod`): its parents
    are no sums (max(children) <= parent <= sum(children)) and the absent children already leave every
    primary its interval; `pattern` asserts that an independent audit passes it."""
    rows = list(csv.DictReader(GOLDEN.open())) if GOLDEN.exists() else []
    if not rows:
        pytest.skip("no golden file yet")
    frame = pd.DataFrame(rows)
    for measure in ("presence", "visitors"):
        part = frame[frame["measure"] == measure]
        assert "primary" in set(part["status"])
        assert measure != "presence" or "secondary" in set(part["status"])
        assert part["bucket_start"].nunique() == len(BUCKETS)
        assert part["level"].nunique() >= 2
    assert not frame["area_id"].isin(ZEROS).any()
