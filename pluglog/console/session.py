"""The console's sessions: who is logged in, and the token every form carries.

A session is a random id in a cookie (``pluglog_console``: HttpOnly,
SameSite=Strict, path ``/console/``, Secure over TLS) mapped in memory to
the principal (``User:alice``, or ``User:ANONYMOUS`` when the broker has no
security and nobody logs in) and a random CSRF token. Every POST must carry
the session's token in its ``csrf`` field (compared in constant time); a
page on another site can neither read the token nor send the cookie, so it
cannot make a logged-in browser act. A login always starts a new session
(no fixation) and the login form's own POST is checked against the
anonymous session its page started.

Sessions expire after :data:`IDLE_SECONDS` without a request and are capped
at :data:`MAX_SESSIONS` logged-in and as many anonymous ones (the least
recently used goes first, each kind apart), so no amount of requests grows
the tables and no flood of login forms pushes out a login. Time comes from
the reactor (``seconds``).
Logins are rate-limited (:class:`LoginBudget`): checking a password costs a
PBKDF2 derivation on the reactor thread, and a password guesser must not
be able to slow the Kafka listener.
"""

import collections
import hmac
import secrets

COOKIE = b"pluglog_console"
IDLE_SECONDS = 3600
MAX_SESSIONS = 10000
ANONYMOUS = "User:ANONYMOUS"


class Session:
    """One browser's login: principal, CSRF token, last use."""

    __slots__ = ("sid", "principal", "csrf", "seen", "user")

    def __init__(self, principal, user, now):
        self.sid = secrets.token_urlsafe(32)
        self.principal = principal
        #: the user name logged in, or None for an anonymous session
        self.user = user
        self.csrf = secrets.token_urlsafe(32)
        self.seen = now


class Sessions:
    """The live sessions, bounded; ``seconds()`` is the reactor's clock."""

    def __init__(self, seconds, idle=IDLE_SECONDS, limit=MAX_SESSIONS):
        self.seconds = seconds
        self.idle = idle
        self.limit = limit
        # Logged-in and anonymous sessions are bounded apart, so a flood of
        # anonymous ones (each login form starts one) never evicts a login.
        self._users = collections.OrderedDict()
        self._anonymous = collections.OrderedDict()

    def __len__(self):
        return len(self._users) + len(self._anonymous)

    def _table(self, found):
        return self._anonymous if found.user is None else self._users

    def get(self, request):
        """The request's live session (touched), or None."""
        raw = request.getCookie(COOKIE)
        if not raw:
            return None
        try:
            sid = raw.decode("ascii")
        except UnicodeDecodeError:
            return None
        found = self._users.get(sid) or self._anonymous.get(sid)
        if found is None:
            return None
        table = self._table(found)
        now = self.seconds()
        if now - found.seen > self.idle:
            del table[sid]
            return None
        found.seen = now
        table.move_to_end(sid)
        return found

    def start(self, request, principal=ANONYMOUS, user=None):
        """A new session for ``principal``, its cookie set on ``request``; the
        request's previous session, if any, ends."""
        self.end(request)
        found = Session(principal, user, self.seconds())
        table = self._table(found)
        table[found.sid] = found
        while len(table) > self.limit:
            table.popitem(last=False)
        request.addCookie(
            COOKIE,
            found.sid.encode("ascii"),
            path=b"/console/",
            httpOnly=True,
            secure=request.isSecure(),
            sameSite="strict",
        )
        return found

    def ensure(self, request):
        """The request's session, starting an anonymous one if it has none."""
        return self.get(request) or self.start(request)

    def end(self, request):
        found = self.get(request)
        if found is not None:
            del self._table(found)[found.sid]
            request.addCookie(COOKIE, b"", path=b"/console/", max_age=b"0", httpOnly=True)


def token_ok(found, sent):
    """Whether ``sent`` (the form's ``csrf`` field) is ``found``'s token."""
    if found is None or not sent:
        return False
    return hmac.compare_digest(found.csrf.encode("ascii"), sent.encode("utf-8", "replace"))


class LoginBudget:
    """At most ``rate`` password checks per second, bursts up to ``burst``."""

    def __init__(self, seconds, rate=5.0, burst=10):
        self.seconds = seconds
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._at = seconds()

    def take(self):
        now = self.seconds()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
