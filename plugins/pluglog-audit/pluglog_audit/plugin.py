"""The entry point pluglog loads: adds the ``audit`` subcommand."""

import pluggy

hookimpl = pluggy.HookimplMarker("pluglog")


# optional: a pluglog older than the hook still loads this package (and its
# brokers still start); it just offers no ``audit`` command.
@hookimpl(optionalhook=True)
def pluglog_add_cli_commands(subparsers):
    from pluglog_audit.report import add_parser

    add_parser(subparsers)
