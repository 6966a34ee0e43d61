"""The console's forms: login, logout, and the actions' confirm and run steps.

Called by :class:`pluglog.console.resource.ConsoleResource` for the routes
that take forms::

    GET  /console/login?next=         the login form (broker with security only)
    POST /console/login               check user and password, start a session
    POST /console/logout              end the session
    GET  /console/actions/NAME?...    the confirmation page (changes nothing)
    POST /console/actions/NAME        run the action (CSRF token required)

The login checks the password against the broker's SCRAM credential store
(the ``verify_login`` callable the web layer passes down), at most
:class:`~pluglog.console.session.LoginBudget` times a second; a failure
says only that the user or password is wrong. Every POST must carry the
session's CSRF token. Action POSTs answer asynchronously: the action's
Deferred writes the result page. An offset reset "to a time" may wait on
the remote tier (tiered storage) before its confirmation page or its run:
:func:`later` answers such pages when their Deferred fires.
"""

import urllib.parse

from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import NOT_DONE_YET

from pluglog.console import actions, state
from pluglog.console.params import PageError, param
from pluglog.console.session import token_ok
from pluglog.logsafe import SafeLogger

log = Logger()
#: user names come from the browser: escaped in log lines
_safe_log = SafeLogger()

READ_ONLY = (
    "the console is read-only (console.read.only=true): creating and deleting topics, "
    "adding partitions and resetting offsets are turned off"
)


def _next(request):
    """Where to go after login: a console path only (no open redirect)."""
    target = (param(request, "next") or "").strip()
    if not target.startswith("/console/") or target.startswith("/console//"):
        return "/console/"
    return target


def login_page(console, request, message=None, status=200):
    if console.verify_login is None:
        request.redirect(_next(request).encode("utf-8"))
        return b""
    found = console.sessions.ensure(request)
    request.setResponseCode(status)
    return console.page(
        request,
        "login.html",
        section="",
        next=_next(request),
        csrf=found.csrf,
        message=message,
    )


def login_post(console, request):
    if console.verify_login is None:
        raise PageError(404, "this broker has no security configured: the console needs no login")
    if not token_ok(console.sessions.get(request), param(request, "csrf")):
        return login_page(console, request, "the login form expired: try again", 403)
    user = (param(request, "user") or "").strip()
    password = param(request, "password") or ""
    if not user or not password:
        return login_page(console, request, "give a user name and a password", 400)
    if not console.logins.take():
        return login_page(console, request, "too many login attempts: wait a second", 429)
    try:
        principal = console.verify_login(user, password)
    except Exception as exc:  # AuthenticationFailed (or a store that failed)
        _safe_log.info("console login failed for {user}: {reason}", user=user, reason=str(exc))
        return login_page(console, request, "wrong user name or password", 403)
    console.sessions.start(request, principal, user)
    _safe_log.info("console login as {principal}", principal=principal)
    request.redirect(_next(request).encode("utf-8"))
    request.setResponseCode(303)
    return b""


def logout_post(console, request):
    found = console.sessions.get(request)
    if found is not None and token_ok(found, param(request, "csrf")):
        console.sessions.end(request)
    request.redirect(b"/console/login" if console.verify_login else b"/console/")
    request.setResponseCode(303)
    return b""


def _action(console, parts):
    if console.read_only:
        raise PageError(403, READ_ONLY)
    if len(parts) != 2 or parts[1] not in actions.NAMES:
        raise PageError(404, "the console has no such action")
    return parts[1]


def confirm_page(console, request, parts):
    name = _action(console, parts)
    found = console.sessions.ensure(request)

    def render(checked):
        return console.page(
            request, "confirm.html", section="", plan=checked, csrf=found.csrf, done=None
        )

    return later(console, request, actions.plan(console.broker, name, request), render)


def run_action(console, request, parts):
    name = _action(console, parts)
    found = console.sessions.get(request)
    if console.verify_login is not None and (found is None or found.user is None):
        raise PageError(403, "log in to act: your session has ended")
    if not token_ok(found, param(request, "csrf")):
        raise PageError(
            403, "the form's token is missing or stale: open the action again and confirm"
        )
    checked = actions.plan(console.broker, name, request)
    return later(console, request, checked, lambda plan: _run(console, request, found, plan))


def _run(console, request, found, checked):
    """Run a checked :class:`~.actions.Plan`; its outcome page follows."""
    name = checked.action
    # The browser's IP for host-based ACLs ("" over a UNIX socket).
    who = (found.principal, getattr(request.getClientAddress(), "host", ""))
    _safe_log.info(
        "console action {action} by {principal}: {summary}",
        action=name,
        principal=found.principal,
        summary=checked.summary,
    )
    finished = []
    request.notifyFinish().addBoth(finished.append)

    def answer(outcome):
        if finished:  # the browser went away
            return
        status = {"done": 200, "denied": 403}.get(outcome.status, 400)
        if outcome.status == "denied":
            what = checked.title.lower()
            outcome = actions.Outcome(
                "denied", f"{who[0]} is not authorized to {what}: {outcome.message}"
            )
        request.setResponseCode(status)
        body = console.page(
            request, "confirm.html", section="", plan=checked, csrf="", done=outcome
        )
        request.write(body)
        request.finish()

    def failed(failure):
        log.failure("console action {action} failed", failure, action=name)
        answer(actions.Outcome("failed", "the action failed; the broker log has the details"))

    d = checked.run(console.ops, who)
    d.addCallback(answer).addErrback(failed)
    return NOT_DONE_YET


def guarded(console, request, run):
    """``run()``'s body, or an error page for PageError, NotFoundError or a bug."""
    try:
        return run()
    except PageError as exc:
        return console.error(request, exc)
    except state.NotFoundError as exc:
        return console.error(request, PageError(404, str(exc)))
    except Exception:
        log.failure("console request {uri} failed", Failure(), uri=request.uri)
        return console.error(
            request, PageError(500, "the page failed; the broker log has the details")
        )


def later(console, request, d, render):
    """The body of a page that waits on ``d`` (a lookup in the remote tier):
    ``render(result)`` makes it, or an error page when ``d`` fails or
    ``render`` raises, as :func:`guarded`. Returned at once when ``d`` has
    fired (local answers); else NOT_DONE_YET, and written when it fires."""
    body = []
    d.addCallbacks(
        lambda value: guarded(console, request, lambda: render(value)),
        lambda failure: guarded(console, request, failure.raiseException),
    )
    d.addCallback(body.append)
    if body:
        return body[0]
    finished = []
    request.notifyFinish().addBoth(finished.append)

    def write(_):
        # Not when the browser went away, nor when ``render`` answers later itself.
        if not finished and body[0] is not NOT_DONE_YET:
            request.write(body[0])
            request.finish()

    d.addCallback(write)
    return NOT_DONE_YET


def login_redirect(request):
    """Send a not-logged-in browser to the login page, back here afterwards."""
    target = urllib.parse.quote(request.uri.decode("latin-1"), safe="/")
    request.redirect(b"/console/login?next=" + target.encode("ascii"))
    return b""
