"""Request framing for KafkaServerProtocol: reads to int32-sized frames, answers per read.

One ``bytearray`` and the expected frame length instead of Twisted's
Int32StringReceiver (which rebuilds its buffer on every read and copies a
1 MB request ~16 times). The whole requests of a read are handled as
memoryview slices of the read itself (no copy); only an incomplete request
is kept in the buffer, and completing it costs one copy of that request.

With many clients a read often holds several requests (50 producers send
~2 per 64 KB read): their answers are held (``_cork``) while the read's
frames are handled and leave in one ``sendmsg`` on the connection's
:class:`~pluglog.server.sendfile.SocketWriter`, not one ``send`` per answer
(bench/RESULTS.md, "50 producers": the send of a small answer on loopback
costs the broker ~10 µs of kernel time, most of it the client's receive
path). Order and content are unchanged: every answer, including those
before a frame that closes the connection, still leaves in request order.
Connections without a writer (TLS, test transports) write through the
transport, which already coalesces until the reactor's next write event.

The memory reservation (``queued.max.request.bytes``, see
:mod:`.connections`) is taken only for a request that is still incomplete
after a read, as before: a whole request in one read is handled at once.
"""

import struct

_SIZE = struct.Struct(">i")


class Framing:
    """Mixin of :class:`~pluglog.server.protocol.KafkaServerProtocol`: the
    framing half of ``dataReceived``. Uses the protocol's ``_buf``,
    ``_need``, ``max_frame``, ``guard``, ``_writer``, ``_cork`` and calls
    its ``_handle_frame`` and ``_bad_input``."""

    def dataReceived(self, data):
        if self._closing:
            return
        self._reads += 1
        buf = self._buf
        if not buf and len(data) >= 4:
            # The common case (one whole request per read, nothing pending):
            # frame the read itself, no copy into and out of the buffer.
            (size,) = _SIZE.unpack_from(data, 0)
            if len(data) == 4 + size and 8 <= size <= self.max_frame:
                self._handle_frame(memoryview(data)[4:])
                return
        if buf:
            need = self._need
            if need is None or len(buf) + len(data) < 4 + need:
                # The pending frame is still incomplete (or its size is not
                # known yet): add the read to it and frame from the buffer.
                buf += data
                if need is not None:
                    return
                data = bytes(buf)
                self._buf = bytearray()
            else:
                # The read completes the pending frame: one copy of the
                # frame (its head from the buffer, its tail from the read);
                # the rest of the read is framed in place below.
                missing = 4 + need - len(buf)
                with memoryview(buf) as head, memoryview(data) as view:
                    frame = memoryview(b"".join((head[4:], view[:missing])))
                # A new buffer, not buf.clear(): clearing reallocs a large
                # buffer down, and glibc raises its mmap threshold only when
                # an mmapped block is free()d. With clear(), a phase of one
                # producer's ~640 KB requests took 8,000-49,000 page faults
                # (perf stat), with a new buffer 3-4,000.
                self._buf = bytearray()
                self._need = None
                self._frames += 1
                if self._reserved or self._mem_wait:
                    self._frame_done()
                if missing == len(data):
                    self._handle_frame(frame)
                    return
                if self._writer is not None:
                    self._cork = []
                try:
                    self._handle_frame(frame)
                    self._frames_in(data, missing)
                finally:
                    self._uncork()
                return
        self._frames_in(data, 0)

    def _frames_in(self, data, pos):
        """Handle every whole frame of ``data`` from ``pos`` in place
        (memoryview slices, no copy); keep the incomplete rest in the
        buffer. The answers to the frames of one read leave together (one
        ``sendmsg``, see :meth:`_uncork`)."""
        if self._writer is not None and self._cork is None:
            self._cork = []
        size_of = _SIZE.unpack_from
        end = len(data)
        max_frame = self.max_frame
        with memoryview(data) as view:
            try:
                while not self._closing and end - pos >= 4:
                    (size,) = size_of(data, pos)
                    if size < 8 or size > max_frame:
                        self._bad_input(
                            f"frame size {size} outside [8, {max_frame}] "
                            "(socket.request.max.bytes)"
                        )
                        return
                    if end - pos < 4 + size:
                        break
                    frame = view[pos + 4 : pos + 4 + size]
                    pos += 4 + size
                    self._frames += 1
                    self._handle_frame(frame)
            finally:
                # Also if a frame's handling raised (Twisted then closes the
                # connection): the answers before it leave, and a held list
                # never outlives the read.
                self._uncork()
            if self._closing or pos == end:
                return
            self._buf += view[pos:]
        if end - pos < 4:
            return
        (size,) = size_of(data, pos)
        if size < 8 or size > max_frame:
            self._bad_input(
                f"frame size {size} outside [8, {max_frame}] (socket.request.max.bytes)"
            )
            return
        self._need = size
        if self.guard is not None and not self.guard.reserve(self, size):
            # queued.max.request.bytes is used up: read no more until
            # another request's memory is released.
            self._mem_wait = True
            self._update_reading()

    def _uncork(self):
        """Send the answers held while one read's frames were handled."""
        corked = self._cork
        if corked is None:
            return
        self._cork = None
        if corked and not self._writer.closed:
            if len(corked) == 1 and isinstance(corked[0], bytes):
                self._writer.write_bytes(corked[0])
            else:
                self._writer.write(corked)

    def _frame_done(self):
        if self._mem_wait:
            self._mem_wait = False
            self.guard.cancel_wait(self)
            self._update_reading()
        if self._reserved:
            self.guard.release(self)

    def memory_granted(self):
        """The guard reserved this connection's frame: read again."""
        self._mem_wait = False
        self._update_reading()
