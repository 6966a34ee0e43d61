"""``log.dirs`` (JBOD) as the broker's options read it: a list of absolute
dirs that wins over ``--data-dir``; bad values get one line naming them."""

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
