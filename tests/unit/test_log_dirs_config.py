"""``log.dirs`` (JBOD) as the broker's options read it: a list of absolute
dirs that wins over ``--data-dir``; bad values get one line naming them."""

import os

import pytest
from twisted.python import usage

from pluglog.errors import ConfigError
from pluglog.tap import Options


def _config(*args):
    options = Options()
    options.parseOptions(list(args))
    return options.broker_config


def test_data_dir_alone_is_the_only_log_dir(tmp_path):
    config = _config("--data-dir", str(tmp_path / "d"))
    assert config.data_dirs == (str(tmp_path / "d"),)


def test_log_dirs_win_and_the_first_holds_the_broker_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    config = _config("--data-dir", str(tmp_path / "d"), "--set", f"log.dirs={a}, {b}")
    assert config.data_dirs == (str(a), str(b))
    assert config.data_dir == str(a)


@pytest.mark.parametrize("value", ["/x,,/y", "/x,/x/", ","])
def test_bad_log_dirs_are_refused_in_one_line(value):
    with pytest.raises((usage.UsageError, ConfigError)) as info:
        _config("--set", f"log.dirs={value}")
    message = str(info.value)
    assert "log.dirs" in message and repr(value) in message and "\n" not in message


def test_workers_with_log_dirs_are_refused(tmp_path):
    with pytest.raises(usage.UsageError, match="--workers 2 with log.dirs"):
        _config(
            "--coordinator",
            "zookeeper",
            "--set",
            "zookeeper.connect=127.0.0.1:2181",
            "--set",
            f"log.dirs={tmp_path / 'a'}",
            "--workers",
            "2",
        )


def test_log_dir_is_the_single_dir_when_log_dirs_is_unset(tmp_path):
    config = _config("--data-dir", str(tmp_path / "d"), "--set", f"log.dir={tmp_path / 'one'}")
    assert config.data_dirs == (str(tmp_path / "one"),)
    assert config.data_dir == str(tmp_path / "one")


def test_log_dirs_win_over_log_dir_in_a_config_file(tmp_path):
    a, b, one = tmp_path / "a", tmp_path / "b", tmp_path / "one"
    path = tmp_path / "broker.ini"
    path.write_text(f"[broker]\nlog.dir = {one}\nlog.dirs = {a},{b}\n")
    config = _config("--config", str(path), "--data-dir", str(tmp_path / "d"))
    assert config.data_dirs == (str(a), str(b)) and config.data_dir == str(a)


def test_log_dir_from_a_config_file_wins_over_data_dir(tmp_path):
    path = tmp_path / "broker.ini"
    path.write_text("[broker]\nlog.dir = relative/logs\n")
    config = _config("--config", str(path), "--data-dir", str(tmp_path / "d"))
    assert config.data_dirs == (os.path.abspath("relative/logs"),)


@pytest.mark.parametrize("value", ["", "/x,/y"])
def test_bad_log_dir_is_refused_in_one_line(value):
    with pytest.raises((usage.UsageError, ConfigError)) as info:
        _config("--set", f"log.dir={value}")
    message = str(info.value)
    assert "log.dir" in message and repr(value) in message and "\n" not in message


def test_workers_with_log_dir_are_refused(tmp_path):
    with pytest.raises(usage.UsageError, match="--workers 2 with log.dir is"):
        _config(
            "--coordinator",
            "zookeeper",
            "--set",
            "zookeeper.connect=127.0.0.1:2181",
            "--set",
            f"log.dir={tmp_path / 'a'}",
            "--workers",
            "2",
        )
