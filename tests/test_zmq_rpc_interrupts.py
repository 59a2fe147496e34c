"""An interrupt (a signal handler's ``KeyboardInterrupt``) landing as a ``tensorwire.zmq.Client``
call took the socket lock: CPython raises it as ``acquire()`` returns, the lock taken, before the
call's ``try`` that lets go of it. The stand-in lock's first ``acquire`` takes it, then raises."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

zmq = pytest.importorskip("zmq")

from tensorwire.builtins import rpc  # noqa: E402
from tensorwire.zmq import Client, Server  # noqa: E402
from tests.interrupts import InterruptedAcquire, free_elsewhere  # noqa: E402


@pytest.fixture
def client() -> Iterator[Client]:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    server = Server(router)
    thread = threading.Thread(target=server.serve, args=(_echo,), kwargs={"poll": 0.02}, daemon=True)
    thread.start()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    made = Client(dealer)
    yield made
    server.close()
    thread.join(5)
    ctx.destroy(linger=0)


def _echo(request: rpc.Request) -> rpc.Result:
    return rpc.Result(method=request.method, ok=True, payload=rpc.Value(value=request.kwargs.get("x")))


@pytest.mark.parametrize("timeout", [5.0, float("inf")], ids=["timed", "no-limit"])
def test_an_interrupt_landing_as_a_call_took_the_socket_lock_lets_go_of_it(client: Client, timeout: float) -> None:
    """The lock stayed held: every later call timed out waiting for the socket (`other calls held
    the socket`), and ``close()`` waited for it forever."""
    lock = client._socket_lock
    client._socket_lock = InterruptedAcquire(lock)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        client.call(rpc.Request(method="echo", kwargs={"x": 1}), timeout=timeout)
    assert free_elsewhere(lock)
    result = client.call(rpc.Request(method="echo", kwargs={"x": 2}), timeout=5)
    assert isinstance(result.payload, rpc.Value) and result.payload.value == 2
    closing = threading.Thread(target=client.close)
    closing.start()
    closing.join(5)
    assert not closing.is_alive()
