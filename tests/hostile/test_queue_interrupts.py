"""An interrupt (a signal handler's ``KeyboardInterrupt``) landing as a ``QueueTransport`` receiver
takes a CUDA item off the queue, before the item's acknowledgement: the sender's tensor stayed in
flight (kept, counted against ``max_in_flight``) until a later tensor of that sender was
acknowledged, for good if none came. The item is now acknowledged all the same and the interrupt
raised. Each landing is a stand-in for the call it lands after (the real call made, then
``KeyboardInterrupt`` raised); the device is a fake (``tests.cuda_fakes``): CPU tensors.
"""

from __future__ import annotations

import queue as stdlib_queue
import threading
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tensorwire import transports
from tensorwire.transports import _queue_buffer
from tensorwire.transports._queue_buffer import _ReceiveBuffer
from tests.cuda_fakes import FakeCudaRuntime


@pytest.fixture
def pair() -> Iterator[tuple[transports.QueueTransport, transports.QueueTransport]]:
    queue: stdlib_queue.Queue[Any] = stdlib_queue.Queue()  # (one that pickles nothing itself)
    tx = transports.QueueTransport(queue, runtime=FakeCudaRuntime(), max_in_flight=2, timeout=0.3)
    rx = transports.QueueTransport(queue, timeout=0.3)
    yield tx, rx
    tx.close()
    rx.close()


def _after(real: Any) -> Any:
    def landed(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise KeyboardInterrupt

    return landed


def _before(real: Any) -> Any:
    """The first call interrupted at its entry, the next ones made."""
    calls: list[int] = []

    def landed(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    return landed


@pytest.mark.parametrize("where", ["opened", "stored", "acknowledged"])
def test_an_interrupt_landing_after_a_cuda_item_left_the_queue_acknowledges_it(
    pair: tuple[transports.QueueTransport, transports.QueueTransport], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """As the tensor was opened (``ForkingPickler.loads`` returned), as the item was to be stored
    (``_store`` entered, the buffer's lock taken again), as its acknowledgement was entered."""
    tx, rx = pair
    tx.begin_message()
    handle = tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    assert handle is not None and tx.in_flight == 1
    with monkeypatch.context() as patched:
        if where == "opened":
            opening = SimpleNamespace(loads=_after(ForkingPickler.loads))  # (this module's: not the pipes')
            patched.setattr(_queue_buffer, "ForkingPickler", opening)
        elif where == "stored":
            patched.setattr(_ReceiveBuffer, "_store", _before(_ReceiveBuffer._store))
        else:
            patched.setattr(_ReceiveBuffer, "_acknowledge", _before(_ReceiveBuffer._acknowledge))
        with pytest.raises(KeyboardInterrupt):
            rx.import_(handle, [], 16, borrow=False)
    assert tx.in_flight == 0  # acknowledged: its sender let go of it
    assert rx.buffered() == 0
    tx.begin_message()
    second = tx.export_device(torch.arange(16, dtype=torch.uint8) * 2, 0, 16, [])
    assert second is not None
    assert bytes(rx.import_(second, [], 16, borrow=False)) == bytes(range(0, 32, 2))
    assert tx.in_flight == 0


def test_an_interrupt_landing_as_a_queue_receiver_let_go_of_its_buffer_lock_raises_it(
    pair: tuple[transports.QueueTransport, transports.QueueTransport],
) -> None:
    """As the receiver let go of its buffer's lock to wait for the queue (``release()`` returned):
    the interrupt left the lock let go of, then notifying the waiting threads and the ``with``
    that held the lock raised ``RuntimeError`` in its place. Now the lock is taken again, the
    interrupt raised, and the item left on the queue for the next read."""
    tx, rx = pair
    ready = threading.Condition(threading.Lock())
    real = ready.release
    landings: list[int] = []

    def release() -> None:
        real()
        if not landings:
            landings.append(1)
            raise KeyboardInterrupt

    ready.release = release  # type: ignore[method-assign]  # (``_drain_one``'s; the ``with``'s is the lock's)
    rx._ready = ready
    tx.begin_message()
    handle = tx.export_device(torch.arange(16, dtype=torch.uint8), 0, 16, [])
    assert handle is not None
    with pytest.raises(KeyboardInterrupt):
        rx.import_(handle, [], 16, borrow=False)
    assert landings == [1]
    assert not ready._lock.locked()  # type: ignore[attr-defined]
    assert bytes(rx.import_(handle, [], 16, borrow=False)) == bytes(range(16))
    assert tx.in_flight == 0
