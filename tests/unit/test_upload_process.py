"""Segment uploads in child processes (pluglog.tiered.upload_process), with
the real ``filesystem`` provider built by name in the child."""

import os
import signal
import subprocess
import sys
import time

import pytest

from pluglog.config import BrokerConfig, parse_settings
from pluglog.errors import RemoteStorageError
from pluglog.storage.remote.filesystem import FilesystemRemoteStorage
from pluglog.storage.remote.metadata import RemoteSegment
from pluglog.tiered.upload_process import BACKGROUND, CATCH_UP, UPLOAD_NICE, ProcessUploader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config_for(root):
    return parse_settings(
        {
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "filesystem",
            "rsm.config.filesystem.root": str(root / "remote"),
        },
        BrokerConfig(data_dir=str(root / "data")),
    )


@pytest.fixture
def uploader(tmp_path):
    (tmp_path / "remote").mkdir()
    up = ProcessUploader("filesystem", config_for(tmp_path), 1, autoload=False)
    yield up
    up.stop()


def test_a_child_process_copies_what_the_brokers_provider_reads(tmp_path, uploader):
    source = tmp_path / "seg.log"
    source.write_bytes(os.urandom(300_000))
    seg = RemoteSegment.new("t", 0, 0, 99, 1, 300_000, [])
    uploader.copy_segment(seg, {"log": str(source), "leader_epoch": b"0\n0\n"})
    # The broker's own provider (same root) reads the child's objects.
    local = FilesystemRemoteStorage(str(tmp_path / "remote"))
    assert local.fetch(seg, "log", 0, None) == source.read_bytes()
    children = [p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == os.getpid()]
    assert children, "the copy ran in this process, not a child"


def test_the_child_runs_at_idle_priority(tmp_path, uploader):
    source = tmp_path / "seg.log"
    source.write_bytes(b"x" * 1000)
    uploader.copy_segment(RemoteSegment.new("t", 0, 0, 9, 1, 1000, []), {"log": str(source)})
    assert uploader.priority == BACKGROUND
    pids = list(uploader._pool._processes)
    assert pids and all(os.sched_getscheduler(pid) == os.SCHED_IDLE for pid in pids)


def test_a_catch_up_child_keeps_a_share_of_a_busy_core(tmp_path):
    (tmp_path / "remote").mkdir()
    up = ProcessUploader("filesystem", config_for(tmp_path), 1, autoload=False, priority=CATCH_UP)
    try:
        copy_once(up, tmp_path)
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        pids = list(up._pool._processes)
        assert pids
        for pid in pids:
            assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, mine + UPLOAD_NICE)
            assert os.sched_getscheduler(pid) == os.SCHED_BATCH
    finally:
        up.stop()


def test_an_error_in_the_child_comes_back_as_the_providers(tmp_path, uploader):
    seg = RemoteSegment.new("t", 0, 0, 99, 1, 10, [])
    with pytest.raises(RemoteStorageError):
        uploader.copy_segment(seg, {"log": str(tmp_path / "missing.log")})


def test_a_killed_child_fails_one_copy_and_the_next_one_works(tmp_path, uploader):
    source = tmp_path / "seg.log"
    source.write_bytes(b"x" * 1000)
    seg = RemoteSegment.new("t", 0, 0, 9, 1, 1000, [])
    uploader.copy_segment(seg, {"log": str(source)})
    for pid in list(uploader._pool._processes):  # the pool's children only
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(RemoteStorageError, match="upload process died"):
        uploader.copy_segment(RemoteSegment.new("t", 0, 10, 19, 1, 1000, []), {"log": str(source)})
    again = RemoteSegment.new("t", 0, 20, 29, 1, 1000, [])
    uploader.copy_segment(again, {"log": str(source)})
    local = FilesystemRemoteStorage(str(tmp_path / "remote"))
    assert local.fetch(again, "log", 0, None) == b"x" * 1000


def test_a_stopped_uploader_refuses_in_one_line(tmp_path, uploader):
    uploader.stop()
    seg = RemoteSegment.new("t", 0, 0, 9, 1, 10, [])
    with pytest.raises(RemoteStorageError, match="stopping"):
        uploader.copy_segment(seg, {"log": str(tmp_path / "x")})


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_the_child_exits_when_the_broker_is_killed(tmp_path):
    # A broker SIGKILLed mid-upload must not leave its upload process behind.
    (tmp_path / "remote").mkdir()
    script = (
        "import sys, os, time\n"
        "from tests.unit.test_upload_process import config_for, copy_once\n"
        "from pathlib import Path\n"
        "from pluglog.tiered.upload_process import UPLOAD_NICE, ProcessUploader\n"
        "up = ProcessUploader('filesystem', config_for(Path(sys.argv[1])), 1, autoload=False)\n"
        "copy_once(up, Path(sys.argv[1]))\n"
        "print(*up._pool._processes, flush=True)\n"
        "time.sleep(60)\n"
    )
    broker = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        children = [int(pid) for pid in broker.stdout.readline().split()]
        assert children and all(os.path.exists(f"/proc/{pid}") for pid in children)
        broker.kill()
        broker.wait()
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in children if _alive(pid)], "it outlived the broker"
    finally:
        broker.kill()


def copy_once(uploader, root):
    source = root / "seg.log"
    source.write_bytes(b"y" * 100)
    uploader.copy_segment(RemoteSegment.new("t", 0, 0, 9, 1, 100, []), {"log": str(source)})


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
