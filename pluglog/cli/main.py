"""``pluglog``: the operator command line (topics, produce, consume, groups, cluster, ...).

Like Kafka's kafka-topics.sh / console producer and consumer /
kafka-consumer-groups.sh, over the Kafka protocol with pluglog's blocking
client, so it works against any Kafka-protocol broker. Usage errors exit 2
with a message naming the bad value; broker errors exit 1 naming the Kafka
error. When the reader of the output goes away (``pluglog consume ... |
head``) the command stops quietly with status 141 (128 + SIGPIPE), as Unix
tools do.
"""

import argparse
import os
import re
import select
import sys

from pluglog import __version__
from pluglog.cli import cluster as cluster_cli
from pluglog.cli import devcluster, groups, top, topics, transactions, transfer, users
from pluglog.cli.common import CliError
from pluglog.client.blocking import BlockingClient, ProtocolError
from pluglog.config import split_host_port
from pluglog.errors import PluginError
from pluglog.plugins import make_plugin_manager

# CliError lives in pluglog.cli.common, the leaf every command imports: run
# as ``python -m pluglog.cli.main`` this module is ``__main__``, and a class
# defined here would not be the one the commands raise, so it would escape
# as a traceback instead of one line.
__all__ = ["CliError", "build_parser", "main"]


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _bootstrap(text):
    """``host:port[,host:port...]``, as printed by ``pluglog dev-cluster``."""
    try:
        for address in text.split(","):
            split_host_port(address.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _connect(bootstrap):
    """A client connected to the first ``-b`` address that accepts; the
    others stay known (``client.seeds``) for a failover."""
    seeds = [split_host_port(a.strip()) for a in bootstrap.split(",")]
    failure = None
    for host, port in seeds:
        try:
            client = BlockingClient(host, port, client_id="pluglog-cli")
        except OSError as exc:
            failure = exc
            continue
        client.seeds = seeds
        return client
    raise failure


def _config_pair(text):
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def plain(text):
    """Docstring text for --help: reStructuredText markup dropped."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "").replace("**", "")


def build_parser():
    parser = argparse.ArgumentParser(prog="pluglog", description=plain(__doc__.splitlines()[0]))
    parser.add_argument("--version", action="version", version=f"pluglog {__version__}")
    parser.add_argument(
        "-b",
        "--bootstrap-server",
        type=_bootstrap,
        default="localhost:9092",
        help="broker host:port, or several separated by commas (default localhost:9092)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cluster_cli.add_parser(sub)
    topics.add_parser(sub, _positive, _config_pair)
    transfer.add_parsers(sub, _positive)
    groups.add_parser(sub)
    transactions.add_parser(sub)
    devcluster.add_parser(sub, _positive)
    top.add_parser(sub, _positive)
    _plugin_commands(sub)
    users.add_parser(sub, _positive)
    return parser


def _plugin_commands(sub):
    """Subcommands of installed plugins (``pluglog_add_cli_commands``); a
    broken plugin costs its commands and a warning, not the whole CLI."""
    try:
        manager = make_plugin_manager()
        manager.hook.pluglog_add_cli_commands(subparsers=sub)
    except PluginError as exc:
        print(f"pluglog: warning: plugin commands unavailable: {exc}", file=sys.stderr)


#: The exit status of a command whose output reader went away (``| head``):
#: 128 + SIGPIPE, what a shell shows for a Unix tool SIGPIPE stopped.
EXIT_PIPE_CLOSED = 141


def _stdout_closed():
    """True when nobody reads our stdout any more (a pipe whose reader
    exited): poll() reports POLLERR on such a write end."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _quiet_pipe_exit():
    """Leave quietly: point stdout at /dev/null so the interpreter's final
    flush does not report the broken pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_PIPE_CLOSED


def main(argv=None):
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader of our output went away (``pluglog consume ... | head``):
        # stop without a message, as Unix tools do.
        return _quiet_pipe_exit()
    except KeyboardInterrupt:
        # Ctrl-C in a command that does not stop on it by itself (consume
        # does, between two fetches): no traceback, 128 + SIGINT.
        print(file=sys.stderr)
        return 130


def _run(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "standalone", False):
        # dev-cluster runs brokers, users add writes a data dir: no broker to talk to.
        try:
            return args.run(None, args) or 0
        except CliError as exc:
            print(f"pluglog: {exc}", file=sys.stderr)
            return 1
    try:
        with _connect(args.bootstrap_server) as client:
            return args.run(client, args) or 0
    except (CliError, ProtocolError) as exc:
        print(f"pluglog: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if isinstance(exc, BrokenPipeError) and _stdout_closed():
            raise  # our reader left, not the broker: main() exits quietly
        print(
            f"pluglog: cannot reach {args.bootstrap_server}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    # Run the imported module's main: under ``python -m`` this file is also
    # ``__main__``, whose CliError is not the one commands import and raise.
    from pluglog.cli.main import main as _main

    sys.exit(_main())
