"""A clean exit for every fairseq command that loads the plugin: stop fairseq's prefetch threads first.

fairseq prefetches batches in a daemon thread (``BufferedIterator``'s ``BackgroundConsumer``: one per
epoch and per validation pass, on by default, ``--data-buffer-size 10``). When a command ends while such
a thread is still working on a batch (collating it, rebuilding it from a DataLoader worker, freeing one),
the thread is inside PyTorch with the GIL released. Python < 3.14 ends such a daemon thread with
``pthread_exit`` when it takes the GIL back after interpreter finalization has begun; PyTorch takes the
GIL back in a C++ ``noexcept`` destructor, so the unwind calls ``std::terminate``: "terminate called
without an active exception", SIGABRT, after "done training" and the last checkpoint
(pytorch/pytorch#38228, pybind/pybind11#2215). How often depends on timing: rare on an idle machine,
more frequent under load or with slow batches.

So when the program has finished, before the interpreter finalizes, each such thread is asked to stop
after the batch in hand and is waited for. The batches still queued are dropped: nothing reads them.
"""

import atexit
import logging
import queue
import threading
import time

from fairseq.data.iterators import BackgroundConsumer

logger = logging.getLogger(__name__)

TIMEOUT = 60.0  # seconds to finish the batch in hand: far more than one batch takes


def stop_prefetch_threads(timeout: float = TIMEOUT) -> None:
    """Stop every live ``BackgroundConsumer`` after the batch it is fetching, and wait for it."""
    consumers = [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer) and t.is_alive()]
    for consumer in consumers:
        # the thread's own limit on the number of batches (its iterator's length): its loop ends after
        # the batch in hand, then it puts its end-of-data marker and returns
        consumer._max_len = 0
    deadline = time.monotonic() + timeout
    for consumer in consumers:
        while consumer.is_alive() and time.monotonic() < deadline:
            _drop_queued_batches(consumer._queue)  # a full queue would block its last put()
            consumer.join(timeout=0.05)
        if consumer.is_alive():
            logger.warning(
                f"a fairseq data prefetch thread did not stop within {timeout:.0f} s; the process "
                "may abort at exit, after its work is done"
            )


def _drop_queued_batches(batches: queue.Queue) -> None:
    try:
        while True:
            batches.get_nowait()
    except queue.Empty:
        pass


def _stop_prefetch_threads_at_exit() -> None:
    try:
        stop_prefetch_threads()
    except Exception as error:  # an exception here would skip the rest of Python's thread shutdown
        logger.warning(f"could not stop fairseq's data prefetch threads at exit: {error!r}")


# Not atexit: torch stops the DataLoader workers in an atexit hook registered after this import, so run
# before ours, and a worker stopped before it began the batch that a prefetch thread waits for never sends
# it (the wait would last the whole timeout). threading's exit hooks run before any atexit hook, as soon
# as the main program has returned (CPython-internal, in 3.9 to 3.14; concurrent.futures uses it too).
register_at_exit = getattr(threading, "_register_atexit", atexit.register)
register_at_exit(_stop_prefetch_threads_at_exit)
