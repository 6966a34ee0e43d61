"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51), KIP-554.

Both work on the broker's credential store (``broker.security.store``: the
data dir's file, or the coordinator's when it offers one), so a credential
altered here is the one the next SASL/SCRAM login checks. The client sends
salt and salted password, never the password; the broker derives the stored
and server keys (:func:`pluglog.security.credentials.from_salted_password`).
Validation and error codes follow Kafka's ``ZkAdminManager``: one result per
user, and a user with any bad entry has none of its changes applied.
Authorization (DESCRIBE / ALTER on the cluster) is in
:mod:`pluglog.server.api_checks`.
"""

from collections import Counter

from twisted.internet import defer

from pluglog.errors import (
    DUPLICATE_RESOURCE,
    NONE,
    RESOURCE_NOT_FOUND,
    UNACCEPTABLE_CREDENTIAL,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_SASL_MECHANISM,
    ConfigError,
)
from pluglog.security.credentials import (
    CODE_MECHANISMS,
    MAX_ITERATIONS,
    MECHANISM_CODES,
    MIN_ITERATIONS,
    credential_store,
    from_salted_password,
)


def _store(broker):
    security = getattr(broker, "security", None)
    if security is not None:
        return security.store
    return credential_store(broker.coordinator, broker.config.data_dir)


def _result(user, code=NONE, message=None, infos=()):
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": infos}


def _infos(mechanisms):
    return [
        {"mechanism": MECHANISM_CODES[m], "iterations": c.iterations}
        for m, c in sorted(mechanisms.items())
        if m in MECHANISM_CODES
    ]


def handle_describe_user_scram_credentials(ctx, request):
    users = _store(ctx.broker).scram_credentials()
    wanted = request["users"]
    if not wanted:
        results = [_result(u, infos=_infos(m)) for u, m in sorted(users.items()) if _infos(m)]
    else:
        counts = Counter(w["name"] for w in wanted)
        results = []
        for name in counts:
            if not name:
                results.append(_result(name, RESOURCE_NOT_FOUND, "Username must not be empty"))
            elif counts[name] > 1:
                message = (
                    "Cannot describe SCRAM credentials for the same user twice in a single "
                    f"request: {name}"
                )
                results.append(_result(name, DUPLICATE_RESOURCE, message))
            elif not _infos(users.get(name, {})):
                message = f"Attempt to describe a user credential that does not exist: {name}"
                results.append(_result(name, RESOURCE_NOT_FOUND, message))
            else:
                results.append(_result(name, infos=_infos(users[name])))
    return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "results": results}


def _entry_error(entry, upsert):
    """(code, message) for an entry Kafka refuses on its own, else None."""
    if not entry["name"]:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if entry["mechanism"] not in CODE_MECHANISMS:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsert:
        if entry["iterations"] > MAX_ITERATIONS:
            return UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if entry["iterations"] < MIN_ITERATIONS:
            return UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if not entry["salt"] or not entry["salted_password"]:
            return UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


def handle_alter_user_scram_credentials(ctx, request):
    store = _store(ctx.broker)
    upsertions, deletions = request["upsertions"], request["deletions"]
    failed = {}  # user -> (code, message), first reason wins
    for entries, upsert in ((deletions, False), (upsertions, True)):
        for entry in entries:
            error = _entry_error(entry, upsert)
            if error is not None:
                failed.setdefault(entry["name"], error)
    pairs = Counter((e["name"], e["mechanism"]) for e in (*upsertions, *deletions))
    for (user, _mechanism), count in pairs.items():
        if count > 1 and user not in failed:
            failed[user] = (
                DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
    existing = store.scram_credentials()
    for entry in deletions:
        user = entry["name"]
        mechanism = CODE_MECHANISMS.get(entry["mechanism"])
        if user not in failed and mechanism not in existing.get(user, {}):
            failed[user] = (
                RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
    drop = [
        (e["name"], CODE_MECHANISMS[e["mechanism"]]) for e in deletions if e["name"] not in failed
    ]
    put = [
        (
            e["name"],
            CODE_MECHANISMS[e["mechanism"]],
            from_salted_password(
                CODE_MECHANISMS[e["mechanism"]], e["salt"], e["salted_password"], e["iterations"]
            ),
        )
        for e in upsertions
        if e["name"] not in failed
    ]
    names = list(dict.fromkeys(e["name"] for e in (*deletions, *upsertions)))

    def answer(_ignored=None):
        results = []
        for name in names:
            code, message = failed.get(name, (NONE, None))
            results.append({"user": name, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "results": results}

    def store_failed(reason):
        # Nothing was written: every user that passed validation failed.
        for name in names:
            failed.setdefault(name, (UNKNOWN_SERVER_ERROR, f"cannot store credentials: {reason}"))
        return answer()

    if not (drop or put):
        return answer()
    try:
        done = store.alter_scram_credentials(put, drop)
    except (OSError, ConfigError) as exc:
        return store_failed(exc)
    if isinstance(done, defer.Deferred):
        # A coordinator's store (ZooKeeper) answers asynchronously.
        return done.addCallbacks(answer, lambda f: store_failed(f.getErrorMessage()))
    return answer()


HANDLERS = {
    50: handle_describe_user_scram_credentials,
    51: handle_alter_user_scram_credentials,
}
