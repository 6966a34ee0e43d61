"""Did Spark end a write task's input, or cut it off? (The Python worker's side.)

A Python data source writer gets its rows as an Arrow stream from the JVM.
When a stage feeding the writer fails part way (a Python UDF raising, a
source read failing), Spark's JVM side stops sending and shuts down its end
of the worker socket without writing the Arrow end-of-stream marker;
pyarrow reads that end of file as the end of the stream, so the writer's
iterator simply stops early. Spark then fails the task, but only after the
writer returned. A transactional writer that committed at that point would
have committed part of its partition, and the retry would find the batch
marked as done: rows lost.

After a complete stream the JVM sends nothing more until it has read the
writer's answer, so the socket has no byte to read; after a cut-off stream
it is at end of file. :func:`input_cut_off` tells the two apart by polling
the worker's input file (found as the ``infile`` of ``pyspark.worker.main``
up the stack) without blocking and without consuming a byte. It returns
None when it cannot tell (not inside a PySpark worker, or a worker layout it
does not know), which the caller treats as complete.
"""

import select
import sys


def _worker_infile():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "pyspark.worker" and frame.f_code.co_name == "main":
            return frame.f_locals.get("infile")
        frame = frame.f_back
    return None


def input_cut_off():
    """True when the JVM closed the task's input without ending the stream,
    False when it did end it, None when this cannot be told."""
    infile = _worker_infile()
    peek = getattr(infile, "peek", None)
    if peek is None:
        return None
    try:
        readable = select.select([infile.fileno()], [], [], 0)[0]
    except (OSError, ValueError):
        return None
    if not readable:
        return False  # the JVM waits for our answer: the stream was complete
    # Readable right after the stream: end of file (b"") when it was cut off.
    return peek(1) == b""
