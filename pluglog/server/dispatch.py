"""Event dispatch for the broker's epoll reactor without the legacy log context.

Twisted's ``EPollReactor.doPoll`` wraps every ready socket's handler in
``twisted.python.log.callWithLogger``, which builds a ``{"system": ...}``
context dict and pushes it through ``twisted.python.context`` so that
``twisted.python.log`` messages emitted inside carry the transport's
``logPrefix``. pluglog logs through ``twisted.logger`` with its own fields
(peer, client id), so the context is never read; building it costs several
microseconds per event with cold caches, on every produce round trip.
:func:`install` replaces the reactor instance's ``doIteration`` with the same
loop minus the context (handler exceptions are still logged, not raised
into the reactor). Any reactor other than epoll is left untouched.
"""

from twisted.logger import Logger

log = Logger()


def install(reactor):
    """Use :func:`_lean_do_poll` for ``reactor`` if it is Twisted's epoll
    reactor; return whether it was installed."""
    try:
        from twisted.internet.epollreactor import EPollReactor
    except ImportError:  # pragma: no cover - not Linux
        return False
    if type(reactor) is not EPollReactor:
        return False
    poller = reactor._poller
    selectables = reactor._selectables
    handle = reactor._doReadOrWrite
    get = selectables.get

    def do_poll(timeout):
        # Twisted's doPoll, minus log.callWithLogger around each event.
        events = poller.poll(-1 if timeout is None else timeout, len(selectables))
        for fd, event in events:
            selectable = get(fd)
            if selectable is not None:
                try:
                    handle(selectable, fd, event)
                except Exception:
                    log.failure("unhandled error dispatching an event for {s!r}", s=selectable)

    reactor.doIteration = reactor.doPoll = do_poll
    return True
