"""Exactly-once through SIGKILLs: bench/txn_crash.py's loop with small numbers."""

import pytest

from bench.txn_crash import run

pytestmark = pytest.mark.integration


def test_consume_transform_produce_survives_sigkills_exactly_once(tmp_path):
    records = 3000
    committed, uncommitted, kills = run(str(tmp_path / "data"), records, kills=3, seed=7)
    assert kills == 3
    expected = {f"out-{i}" for i in range(records)}
    assert set(committed) == expected, f"missing {len(expected - set(committed))}"
    assert max(committed.values()) == 1, "a record is visible twice at read_committed"
    # Aborted attempts (killed mid-transaction) stay in the log, hidden above.
    assert sum(uncommitted.values()) >= records
