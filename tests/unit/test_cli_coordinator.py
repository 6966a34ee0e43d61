"""The CLI's coordinator retries (``pluglog.cli.groups.on_coordinator``):
found again after NOT_COORDINATOR, asked again while loading, and a clear
error once the wait is over. The coordinators are stand-ins answering set
error codes; the real path is run by the audit plugin's tests."""

import contextlib

import pytest

from pluglog import errors
from pluglog.cli import groups
from pluglog.cli.common import CliError

pytestmark = pytest.mark.unit


class Coordinator:
    def __init__(self, name, codes):
        self.name = name
        self.codes = list(codes)
        self.asked = 0

    def call(self):
        self.asked += 1
        return self.codes.pop(0), self.name


@pytest.fixture
def found(monkeypatch):
    """The coordinators FindCoordinator names, in turn."""
    named = []
    monkeypatch.setattr(groups.time, "sleep", lambda s: None)

    @contextlib.contextmanager
    def coordinator(client, group):
        yield named.pop(0)

    monkeypatch.setattr(groups, "coordinator", coordinator)
    return named


def test_not_coordinator_finds_the_coordinator_again(found):
    moved = Coordinator("old", [errors.NOT_COORDINATOR])
    loading = Coordinator("new", [errors.COORDINATOR_LOAD_IN_PROGRESS] * 2 + [errors.NONE])
    found.extend([moved, loading])
    assert groups.on_coordinator(None, "g", lambda c: c.call(), "g") == "new"
    assert (moved.asked, loading.asked) == (1, 3)


def test_other_errors_are_not_retried(found):
    found.append(Coordinator("c", [errors.GROUP_AUTHORIZATION_FAILED]))
    with pytest.raises(CliError, match="GROUP_AUTHORIZATION_FAILED"):
        groups.on_coordinator(None, "g", lambda c: c.call(), "g")


def test_the_wait_ends_with_the_last_error(found, monkeypatch):
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(groups.time, "monotonic", lambda: next(clock))
    found.extend(Coordinator(str(i), [errors.NOT_COORDINATOR]) for i in range(5))
    with pytest.raises(CliError, match="NOT_COORDINATOR"):
        groups.on_coordinator(None, "g", lambda c: c.call(), "g")
    assert len(found) == 3  # 15 s at 10 s a step: two lookups, then the error
