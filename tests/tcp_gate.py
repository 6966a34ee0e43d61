"""A TCP relay the tests can cut: the network between a broker and its S3 server,
or between brokers and ZooKeeper.

:class:`TcpGate` listens on a port of the worker's slice and relays every
connection to a target. ``close()`` stops listening and resets every relayed
connection (to the broker the server has gone: connections are refused);
``stall()`` keeps accepting but relays nothing (a server that hangs
mid-request); ``open()`` restores it on the same port. It runs in threads of
the test process and relays bytes unchanged.
"""

import socket
import threading

from pluglog.childprocess import free_port


class TcpGate:
    def __init__(self, target_port, host="127.0.0.1"):
        self.host = host
        self.target = (host, target_port)
        self.port = free_port()
        self._server = None
        self._conns = []
        self._lock = threading.Lock()
        self.stalled = False
        self.open()

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def open(self):
        self.stalled = False
        if self._server is not None:
            return
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((self.host, self.port))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stall(self):
        self.stalled = True

    def close(self):
        server, self._server = self._server, None
        if server is not None:
            # shutdown() wakes the accept() blocked in the relay's thread;
            # close() alone would leave the port listening until it returns.
            try:
                server.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            server.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            # shutdown() first: it wakes the relay thread blocked in recv().
            for step in (lambda c: c.shutdown(socket.SHUT_RDWR), lambda c: c.close()):
                try:
                    step(conn)
                except OSError:
                    pass

    def _accept(self, server):
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                while self.stalled:
                    threading.Event().wait(0.05)
                    if self._server is None:
                        return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
