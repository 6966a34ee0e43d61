"""SCRAM credentials: salted, never plain; the file store of a local broker.

A credential is Kafka's ScramCredential: ``salt``, ``stored_key``,
``server_key`` and ``iterations`` (RFC 5802), made with :mod:`scramp`.
:class:`FileCredentialStore` keeps them in ``<data dir>/scram-credentials.json``
written atomically (:func:`pluglog.fileutil.atomic_write`). It has the small
interface a coordinator can offer instead (``scram_credentials()`` and
``alter_scram_credentials(upsertions, deletions)``), so a ZooKeeper
coordinator can keep them under ``/config/users/<name>`` as Kafka does:
:func:`credential_store` prefers the coordinator's.
"""

import base64
import dataclasses
import json
import os

from scramp import ScramMechanism

from pluglog.errors import ConfigError
from pluglog.fileutil import atomic_write

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's wire codes for the mechanisms (DescribeUserScramCredentials)
MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
CODE_MECHANISMS = {code: name for name, code in MECHANISM_CODES.items()}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
FILE_NAME = "scram-credentials.json"


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self):
        enc = base64.b64encode
        return {
            "salt": enc(self.salt).decode(),
            "stored_key": enc(self.stored_key).decode(),
            "server_key": enc(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, data):
        dec = base64.b64decode
        return cls(
            dec(data["salt"]), dec(data["stored_key"]), dec(data["server_key"]), data["iterations"]
        )


def make_credential(mechanism, password, iterations=MIN_ITERATIONS, salt=None):
    """A new salted credential for ``password`` (str or bytes)."""
    if mechanism not in SCRAM_MECHANISMS:
        raise ConfigError(f"mechanism {mechanism!r} is not one of {', '.join(SCRAM_MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ConfigError(f"iterations {iterations} outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    if isinstance(password, bytes):
        password = password.decode("utf-8")
    salt_, stored, server, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return ScramCredential(salt_, stored, server, count)


def _digest(mechanism):
    import hashlib

    return hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512


def salted_password(mechanism, password, salt, iterations):
    """RFC 5802's SaltedPassword, Hi(password, salt, i) = PBKDF2-HMAC: what an
    AlterUserScramCredentials client sends instead of the password."""
    import hashlib

    name = _digest(mechanism)().name
    return hashlib.pbkdf2_hmac(name, password.encode("utf-8"), bytes(salt), iterations)


def from_salted_password(mechanism, salt, salted_password, iterations):
    """The credential for AlterUserScramCredentials' (salt, salted password)."""
    import hmac

    digest = _digest(mechanism)
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = digest(client_key).digest()
    server_key = hmac.new(salted_password, b"Server Key", digest).digest()
    return ScramCredential(bytes(salt), stored_key, server_key, iterations)


class FileCredentialStore:
    """``{user: {mechanism: ScramCredential}}`` in a JSON file of the data dir."""

    def __init__(self, data_dir):
        self.path = os.path.join(data_dir, FILE_NAME)
        self._users = self._load()

    def _load(self):
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read SCRAM credentials {self.path!r}: {exc}") from None
        return {
            user: {mech: ScramCredential.from_json(c) for mech, c in mechs.items()}
            for user, mechs in data.get("users", {}).items()
        }

    def scram_credentials(self):
        return self._users

    def alter_scram_credentials(self, upsertions=(), deletions=()):
        """Apply ``[(user, mechanism, ScramCredential)]`` and ``[(user, mechanism)]``."""
        users = {user: dict(mechs) for user, mechs in self._users.items()}
        for user, mechanism in deletions:
            users.get(user, {}).pop(mechanism, None)
            if user in users and not users[user]:
                del users[user]
        for user, mechanism, credential in upsertions:
            users.setdefault(user, {})[mechanism] = credential
        data = {
            "users": {
                user: {mech: cred.to_json() for mech, cred in sorted(mechs.items())}
                for user, mechs in sorted(users.items())
            }
        }
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        atomic_write(self.path, json.dumps(data, indent=1).encode())
        self._users = users


def credential_store(coordinator, data_dir):
    """The coordinator's credential store if it offers one, else the data dir's file."""
    if hasattr(coordinator, "scram_credentials") and hasattr(
        coordinator, "alter_scram_credentials"
    ):
        return coordinator
    return FileCredentialStore(data_dir)
