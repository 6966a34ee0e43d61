"""pluglog.childprocess.free_port: the per-worker port range of the parallel suite."""

import socket

import pytest

from pluglog import childprocess
from pluglog.childprocess import PORT_RANGE_ENV, free_port


@pytest.fixture
def port_range(monkeypatch):
    def use(low, high):
        monkeypatch.setenv(PORT_RANGE_ENV, f"{low}-{high}")
        monkeypatch.setattr(childprocess, "_cursor", {})

    return use


def _listening_socket():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_without_a_range_the_kernel_picks(monkeypatch):
    monkeypatch.delenv(PORT_RANGE_ENV, raising=False)
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_ports_come_from_the_range_and_do_not_repeat(port_range):
    # Below the ephemeral ports: a test broker binds its port a while after
    # the pick, so one process must not hand out the same port twice.
    port_range(24000, 24039)
    ports = [free_port() for _ in range(20)]
    assert all(24000 <= port <= 24039 for port in ports)
    assert len(set(ports)) == 20


def test_a_port_in_use_is_skipped(port_range):
    with _listening_socket() as taken:
        port = taken.getsockname()[1]
        port_range(port, port + 20)
        childprocess._cursor[f"{port}-{port + 20}"] = 0  # start at the taken one
        assert port < free_port() <= port + 20


def test_a_full_range_is_an_error(port_range):
    with _listening_socket() as taken:
        port = taken.getsockname()[1]
        port_range(port, port)
        with pytest.raises(OSError, match=PORT_RANGE_ENV):
            free_port()
