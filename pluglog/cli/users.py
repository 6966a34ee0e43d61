"""``pluglog users add|list|delete``: SCRAM credentials, like Kafka's ``kafka-configs``.

Two ways to reach the credentials, as in Kafka:

* ``--data-dir DIR`` writes the broker's credential file directly, before
  the first start (Kafka's ``kafka-storage format --add-scram``);
* ``--bootstrap-server HOST:PORT`` goes through AlterUserScramCredentials /
  DescribeUserScramCredentials on a running broker (Kafka's ``kafka-configs
  --alter --add-config 'SCRAM-SHA-256=[password=...]'``), logged in with the
  Kafka client properties of ``--command-config FILE`` (``security.protocol``,
  ``sasl.*``, ``ssl.*``). The salt and salted password are computed here;
  the password never goes over the wire.

The password is read from stdin (``--password-stdin``) so it never shows in
the process list or shell history.
"""

import os
import sys

from pluglog.cli.common import CliError
from pluglog.cli.login import LoginError, connect, read_properties
from pluglog.client.blocking import ProtocolError
from pluglog.errors import ConfigError
from pluglog.security.credentials import (
    CODE_MECHANISMS,
    MECHANISM_CODES,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    FileCredentialStore,
    make_credential,
    salted_password,
)

#: Kafka's error names for the codes these APIs answer
_ERRORS = {
    31: "CLUSTER_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM",
    91: "RESOURCE_NOT_FOUND",
    92: "DUPLICATE_RESOURCE",
    93: "UNACCEPTABLE_CREDENTIAL",
}


def _target(parser):
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", help="the broker's data dir (write before the broker starts)")
    where.add_argument(
        "--bootstrap-server",
        dest="server",
        metavar="HOST:PORT",
        help="a running broker (AlterUserScramCredentials; needs ALTER on the cluster)",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client properties for the admin login (security.protocol, sasl.*, ssl.*)",
    )


def _mechanism_option(parser, what):
    parser.add_argument(
        "--mechanism",
        choices=SCRAM_MECHANISMS,
        action="append",
        help=f"SCRAM mechanism (repeatable; default {what})",
    )


def add_parser(sub, positive):
    users = sub.add_parser("users", help="manage SCRAM users (SASL/SCRAM and PLAIN logins)")
    actions = users.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a user or change its password")
    add.add_argument("name", help="user name (the principal is User:NAME)")
    _mechanism_option(add, "both")
    add.add_argument("--iterations", type=positive, default=MIN_ITERATIONS)
    add.add_argument(
        "--password-stdin", action="store_true", required=True, help="read the password from stdin"
    )
    _target(add)
    add.set_defaults(run=run_add, standalone=True)
    listing = actions.add_parser("list", help="users with SCRAM credentials, and their mechanisms")
    _target(listing)
    listing.set_defaults(run=run_list, standalone=True)
    delete = actions.add_parser("delete", help="remove a user's SCRAM credentials")
    delete.add_argument("name")
    _mechanism_option(delete, "every one the user has")
    _target(delete)
    delete.set_defaults(run=run_delete, standalone=True)


def _fail(action, message):
    return CliError(f"users {action}: {message}")


def _check_name(action, name):
    if not name or any(ch in name for ch in "\0\n"):
        raise _fail(action, f"bad user name {name!r}")


def _file_store(action, args):
    from pluglog.errors import ConfigError

    try:
        return FileCredentialStore(args.data_dir)
    except ConfigError as exc:
        raise _fail(action, exc) from None


def _request(action, args, api_key, body):
    """One request to ``--bootstrap-server``, logged in per ``--command-config``."""
    try:
        props = read_properties(args.command_config) if args.command_config else {}
        with connect(args.server, props) as client:
            return client.request(api_key, 0, body)
    except (ConfigError, LoginError, ProtocolError) as exc:
        raise _fail(action, exc) from None
    except OSError as exc:
        raise _fail(action, f"cannot reach {args.server}: {exc.strerror or exc}") from None


def _check_results(action, answer):
    if answer.get("error_code"):
        code = answer["error_code"]
        raise _fail(action, f"{_ERRORS.get(code, code)}: {answer.get('error_message') or ''}")
    for result in answer["results"]:
        if result["error_code"]:
            code = result["error_code"]
            name = _ERRORS.get(code, f"error {code}")
            raise _fail(action, f"{result['user']}: {name}: {result['error_message'] or ''}")


def run_add(_client, args):
    from pluglog.errors import ConfigError

    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise _fail("add", "empty password on stdin")
    _check_name("add", args.name)
    mechanisms = args.mechanism or SCRAM_MECHANISMS
    if args.server:
        upsertions = []
        for mechanism in mechanisms:
            salt = os.urandom(32)
            upsertions.append(
                {
                    "name": args.name,
                    "mechanism": MECHANISM_CODES[mechanism],
                    "iterations": args.iterations,
                    "salt": salt,
                    "salted_password": salted_password(mechanism, password, salt, args.iterations),
                }
            )
        answer = _request("add", args, 51, {"deletions": [], "upsertions": upsertions})
        _check_results("add", answer)
        print(f"user {args.name}: {', '.join(mechanisms)} credential set on {args.server}")
        return 0
    try:
        store = _file_store("add", args)
        upserts = [
            (args.name, mechanism, make_credential(mechanism, password, args.iterations))
            for mechanism in mechanisms
        ]
        store.alter_scram_credentials(upserts)
    except (ConfigError, OSError) as exc:
        raise _fail("add", exc) from None
    print(f"user {args.name}: {', '.join(mechanisms)} credential written to {store.path}")
    return 0


def _described(args):
    """``{user: [(mechanism, iterations)]}`` from the broker or the data dir."""
    if args.server:
        answer = _request("list", args, 50, {"users": None})
        _check_results("list", answer)
        return {
            r["user"]: [
                (CODE_MECHANISMS.get(i["mechanism"], str(i["mechanism"])), i["iterations"])
                for i in r["credential_infos"]
            ]
            for r in answer["results"]
        }
    users = _file_store("list", args).scram_credentials()
    return {
        user: [(m, c.iterations) for m, c in sorted(mechs.items())]
        for user, mechs in sorted(users.items())
    }


def run_list(_client, args):
    for user, infos in _described(args).items():
        described = ", ".join(f"{m} (iterations {n})" for m, n in infos)
        print(f"{user}  {described}")
    return 0


def run_delete(_client, args):
    from pluglog.errors import ConfigError

    _check_name("delete", args.name)
    if args.server:
        mechanisms = args.mechanism
        if not mechanisms:
            answer = _request("delete", args, 50, {"users": [{"name": args.name}]})
            _check_results("delete", answer)
            infos = answer["results"][0]["credential_infos"]
            mechanisms = [CODE_MECHANISMS[i["mechanism"]] for i in infos]
        deletions = [{"name": args.name, "mechanism": MECHANISM_CODES[m]} for m in mechanisms]
        answer = _request("delete", args, 51, {"deletions": deletions, "upsertions": []})
        _check_results("delete", answer)
    else:
        store = _file_store("delete", args)
        have = store.scram_credentials().get(args.name, {})
        mechanisms = args.mechanism or sorted(have)
        missing = [m for m in mechanisms if m not in have]
        if missing or not mechanisms:
            what = ", ".join(missing) or "credentials"
            raise _fail("delete", f"{args.name}: RESOURCE_NOT_FOUND: no {what}")
        try:
            store.alter_scram_credentials((), [(args.name, m) for m in mechanisms])
        except (ConfigError, OSError) as exc:
            raise _fail("delete", exc) from None
    print(f"user {args.name}: {', '.join(mechanisms)} credential deleted")
    return 0
