"""``pluglog users add``: SCRAM credentials, like Kafka's ``kafka-configs --add-config SCRAM-...``.

With ``--data-dir`` the salted credential is written straight into the
broker's credential file before the first start (Kafka's ``kafka-storage
format --add-scram``). The password is read from stdin (``--password-stdin``)
so it never shows in the process list or shell history.
"""

import sys

from pluglog.security.credentials import (
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    FileCredentialStore,
    make_credential,
)


def add_parser(sub, positive):
    users = sub.add_parser("users", help="manage SCRAM users (SASL/SCRAM and PLAIN logins)")
    actions = users.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a user or change its password")
    add.add_argument("name", help="user name (the principal is User:NAME)")
    add.add_argument(
        "--mechanism",
        choices=SCRAM_MECHANISMS,
        action="append",
        help="SCRAM mechanism (repeatable; default both)",
    )
    add.add_argument("--iterations", type=positive, default=MIN_ITERATIONS)
    add.add_argument(
        "--password-stdin", action="store_true", required=True, help="read the password from stdin"
    )
    add.add_argument(
        "--data-dir", required=True, help="the broker's data dir (write before the broker starts)"
    )
    add.set_defaults(run=run_add, standalone=True)


def run_add(_client, args):
    from pluglog.cli.main import CliError
    from pluglog.errors import ConfigError

    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("users add: empty password on stdin")
    if not args.name or any(ch in args.name for ch in "\0\n"):
        raise CliError(f"users add: bad user name {args.name!r}")
    try:
        store = FileCredentialStore(args.data_dir)
        upserts = [
            (args.name, mechanism, make_credential(mechanism, password, args.iterations))
            for mechanism in args.mechanism or SCRAM_MECHANISMS
        ]
        store.alter_scram_credentials(upserts)
    except (ConfigError, OSError) as exc:
        raise CliError(f"users add: {exc}") from None
    mechanisms = ", ".join(m for _u, m, _c in upserts)
    print(f"user {args.name}: {mechanisms} credential written to {store.path}")
    return 0
