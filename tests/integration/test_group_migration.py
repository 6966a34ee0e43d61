"""KIP-1099: groups converting between the classic and the consumer protocol
(``group.consumer.migration.policy``), with real clients against the broker
process."""

import pytest

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


def test_bad_migration_policy_is_refused_in_one_line(tmp_path):
    exited = BrokerProcess(
        tmp_path / "data", settings={"group.consumer.migration.policy": "sideways"}
    ).run_until_exit()
    assert exited.returncode == 2
    # The setting is refused while the options are read: the reason first,
    # then the pointer to --help, and no traceback.
    lines = exited.stderr.splitlines()
    assert lines[0] == (
        "twistd pluglog: group.consumer.migration.policy: 'sideways' is not one of "
        "disabled, upgrade, downgrade, bidirectional"
    )
    assert len(lines) == 2 and "--help" in lines[1]
    assert "Traceback" not in exited.stderr + exited.log
