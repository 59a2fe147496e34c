"""Ways to move a tensor between two processes: tensorwire's modes and the peers.

Each mode has a sender half and a receiver half, built inside their own processes from the
shared ``channel`` the harness gives both (a Pipe end, a queue, or a zmq address). ``send``
starts from a tensor the producer already holds; ``recv`` returns a tensor the consumer can use.
The pool modes name their backing: sealed memfds (the default ``ShmTransport()``) or, in the rows
labelled "named segments", files in /dev/shm (``ShmTransport(backing="named")``).
"""

from __future__ import annotations

import mmap
import os
import pickle
import warnings
from multiprocessing import resource_tracker, shared_memory
from typing import Any, ClassVar

import msgspec
import numpy as np
import torch

__all__ = ["FLOORS", "MODES", "PEERS", "POOL_TWINS", "TENSORWIRE"]


def _fill(tensor: torch.Tensor, template: torch.Tensor) -> None:
    """Copy ``template`` into ``tensor`` on this thread (numpy): torch's ``copy_`` and ``clone`` leave
    their worker threads spinning after a large copy, into the timed transfer that follows, on the
    CPUs the receiver needs, which would charge a mode for how its sender prepared the tensor."""
    np.copyto(tensor.numpy(), template.numpy())


def _copy_of(template: torch.Tensor) -> torch.Tensor:
    """A new ordinary tensor holding ``template``'s values (copied as ``_fill`` copies)."""
    return torch.from_numpy(template.numpy().copy())


class Mode:
    """One way of moving a tensor; subclasses fill in the halves."""

    name = ""
    channel = "pipe"  # what the harness must create: "pipe", "queue" or "zmq"
    allocates = False  # the producer writes into memory the mode hands out (zero-copy modes)
    requires: ClassVar[tuple[str, ...]] = ()  # optional modules the mode imports (the bench extra)
    carries = True  # the tensor received holds the values sent (the harness checks three of them)

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def prepare(self, template: torch.Tensor) -> torch.Tensor:
        """The tensor to send (outside the timed window)."""
        return template

    def send(self, tensor: torch.Tensor) -> None:
        raise NotImplementedError

    def recv(self) -> torch.Tensor:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the mode holds."""


class _Frames(Mode):
    """tensorwire: frames over a pipe (frame 0 and inline buffers), the rest out of band."""

    transport_options: ClassVar[dict[str, Any]] = {}
    decode_options: ClassVar[dict[str, Any]] = {}
    inline_threshold: int | None = None
    _receiver: Any = None  # the receiving half's tensorwire.pipe.Receiver, made on first use

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        import tensorwire as tw
        from tensorwire import transports
        from tensorwire.builtins import REGISTRY, diffusion

        self._output = diffusion.Output
        self.shm = transports.ShmTransport(**self.transport_options)
        options = (
            tw.EncodeOptions()
            if self.inline_threshold is None
            else tw.EncodeOptions(
                inline_threshold=self.inline_threshold,  # a mode through shared memory sends even small tensors there
                embed_threshold=0 if self.inline_threshold == 0 else tw.EncodeOptions().embed_threshold,
            )
        )
        self.encoder = tw.Encoder(transport=self.shm, options=options)
        self.decoder = tw.Decoder(REGISTRY, transports=[self.shm], options=tw.DecodeOptions(**self.decode_options))

    def send(self, tensor: torch.Tensor) -> None:
        from tensorwire import pipe

        pipe.send(self.conn, self.encoder.encode(self._output(output=tensor)))  # one blob, gathered by writev

    def recv(self) -> torch.Tensor:
        from tensorwire import pipe

        if self._receiver is None:  # read into a reused writable buffer: tensors are built in place
            self._receiver = pipe.Receiver(self.conn, max_bytes=1 << 40)
        tensor: torch.Tensor = self.decoder.decode(self._receiver.recv()).output
        return tensor

    def close(self) -> None:
        self.shm.close()


class TwInline(_Frames):
    name = "tensorwire inline"
    inline_threshold = 2**62


class TwShmCopy(_Frames):
    name = "tensorwire shm copy-receive"
    transport_options: ClassVar[dict[str, Any]] = {"pool": False}
    decode_options: ClassVar[dict[str, Any]] = {"borrow": False}
    inline_threshold = 0


class TwShmBorrow(_Frames):
    name = "tensorwire shm borrow"
    transport_options: ClassVar[dict[str, Any]] = {"pool": False}
    decode_options: ClassVar[dict[str, Any]] = {"borrow": True}
    inline_threshold = 0


class TwPool(_Frames):
    """An ordinary tensor copied into a warm pool slot (a sealed memfd)."""

    name = "tensorwire pool (one copy)"
    transport_options: ClassVar[dict[str, Any]] = {"backing": "memfd"}
    inline_threshold = 0

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self._sent = 0  # bytes of the previous tensor

    def prepare(self, template: torch.Tensor) -> torch.Tensor:
        from tensorwire.transports._pool import size_class

        nbytes = template.numel() * template.element_size()
        pool = self.shm.pool
        assert pool is not None
        if nbytes == self._sent and size_class(nbytes) not in {slot.capacity for slot in pool.slots()}:
            raise RuntimeError(f"{self.name}: {nbytes} bytes went to a one-shot segment (the pool's budget is full)")
        self._sent = nbytes
        return template


class TwPoolNamed(TwPool):
    name = "tensorwire pool (one copy), named segments"
    transport_options: ClassVar[dict[str, Any]] = {"backing": "named"}


class TwPoolZeroCopy(_Frames):
    """A tensor allocated in a pool slot (a sealed memfd) and handed over as it is."""

    name = "tensorwire pool-allocated (zero-copy)"
    transport_options: ClassVar[dict[str, Any]] = {"backing": "memfd"}
    inline_threshold = 0
    allocates = True

    def prepare(self, template: torch.Tensor) -> torch.Tensor:
        tensor = self.shm.empty_like(template)  # a full pool is a TransportError, never a fallback
        _fill(tensor, template)
        return tensor


class TwPoolZeroCopyNamed(TwPoolZeroCopy):
    name = "tensorwire pool-allocated (zero-copy), named segments"
    transport_options: ClassVar[dict[str, Any]] = {"backing": "named"}


class TwQueue(_Frames):
    """tensorwire over a torch.multiprocessing queue: storages moved into shared memory, sent by fd."""

    name = "tensorwire queue"
    channel = "pipe+queue"
    inline_threshold = 0

    def __init__(self, conn: Any) -> None:
        import tensorwire as tw
        from tensorwire import transports
        from tensorwire.builtins import REGISTRY, diffusion

        self.conn, queue = conn
        self._output = diffusion.Output
        self.queue = transports.QueueTransport(queue)
        self.encoder = tw.Encoder(transport=self.queue, options=tw.EncodeOptions(inline_threshold=0, embed_threshold=0))
        self.decoder = tw.Decoder(REGISTRY, transports=[self.queue])

    def prepare(self, template: torch.Tensor) -> torch.Tensor:
        return _copy_of(template)  # an ordinary tensor each time: the transport moves it into shared memory

    def close(self) -> None:
        self.queue.close()


class TwDefault(_Frames):
    """What a plain Encoder(transport=ShmTransport()) does: inline below the threshold, pool above."""

    name = "tensorwire default"


class PickleInband(Mode):
    name = "pickle-5 in-band, Pipe"

    def send(self, tensor: torch.Tensor) -> None:
        self.conn.send_bytes(pickle.dumps(tensor, protocol=5))

    def recv(self) -> torch.Tensor:
        tensor: torch.Tensor = pickle.loads(self.conn.recv_bytes())
        return tensor


class PickleOobShm(Mode):
    name = "pickle-5 out-of-band, fresh SharedMemory"

    def send(self, tensor: torch.Tensor) -> None:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(tensor.numpy(), protocol=5, buffer_callback=buffers.append)
        raw = [b.raw() for b in buffers]
        shm = shared_memory.SharedMemory(create=True, size=max(1, sum(r.nbytes for r in raw)))
        buf = shm.buf
        assert buf is not None
        offset = 0
        for r in raw:
            buf[offset : offset + r.nbytes] = r
            offset += r.nbytes
        # the receiver unlinks; unregistered before it can (the tracker is shared: no double removal)
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
        self.conn.send((head, shm.name, [r.nbytes for r in raw]))
        shm.close()

    def recv(self) -> torch.Tensor:
        head, name, sizes = self.conn.recv()
        shm = shared_memory.SharedMemory(name=name)
        buf = shm.buf
        assert buf is not None
        views, offset = [], 0
        for size in sizes:
            views.append(buf[offset : offset + size])
            offset += size
        array = pickle.loads(head, buffers=views).copy()
        del views
        shm.close()
        shm.unlink()
        return torch.from_numpy(array)


class ReferenceStyle(Mode):
    name = "reference style (fresh segment, copy out, unlink)"

    def send(self, tensor: torch.Tensor) -> None:
        array = tensor.numpy()
        shm = shared_memory.SharedMemory(create=True, size=max(1, array.nbytes))
        np.copyto(np.ndarray(array.shape, array.dtype, buffer=shm.buf), array)
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]  # as above
        self.conn.send({"name": shm.name, "shape": list(array.shape), "dtype": str(array.dtype)})
        shm.close()

    def recv(self) -> torch.Tensor:
        handle = self.conn.recv()
        shm = shared_memory.SharedMemory(name=handle["name"])
        view = np.ndarray(handle["shape"], dtype=np.dtype(handle["dtype"]), buffer=shm.buf)
        array = view.copy()
        del view
        shm.close()
        shm.unlink()
        return torch.from_numpy(array)


class TorchQueue(Mode):
    name = "torch.multiprocessing Queue, share_memory_()"
    channel = "queue"

    def prepare(self, template: torch.Tensor) -> torch.Tensor:
        return _copy_of(template)  # an ordinary tensor each time: share_memory_() moves it (a copy)

    def send(self, tensor: torch.Tensor) -> None:
        tensor.share_memory_()  # type: ignore[no-untyped-call]
        self.conn.put(tensor)

    def recv(self) -> torch.Tensor:
        tensor: torch.Tensor = self.conn.get()
        return tensor


class _Blob(msgspec.Struct, array_like=True):
    shape: list[int]
    dtype: str
    data: bytearray


class MsgspecInline(Mode):
    name = "msgspec inline bytes, Pipe"

    def send(self, tensor: torch.Tensor) -> None:
        array = tensor.numpy()
        data: Any = array.data.cast("B")  # encoded as bin like the bytearray it decodes to
        self.conn.send_bytes(msgspec.msgpack.encode(_Blob(list(array.shape), str(array.dtype), data)))

    def recv(self) -> torch.Tensor:
        blob = msgspec.msgpack.decode(self.conn.recv_bytes(), type=_Blob)
        return (
            torch.frombuffer(blob.data, dtype=torch.float32).view(blob.shape) if blob.data else torch.empty(blob.shape)
        )


class Zmq(Mode):
    name = "pyzmq PUSH/PULL copy=False, ipc://"
    channel = "zmq"
    requires = ("zmq",)

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        import zmq

        self.context = zmq.Context()
        self.address, role = conn
        self.socket = self.context.socket(zmq.PUSH if role == "sender" else zmq.PULL)
        if role == "sender":
            self.socket.bind(self.address)
        else:
            self.socket.connect(self.address)

    def send(self, tensor: torch.Tensor) -> None:
        array = tensor.numpy()
        self.socket.send_multipart([str(array.shape[0]).encode(), array.data.cast("B")], copy=False)

    def recv(self) -> torch.Tensor:
        _, body = self.socket.recv_multipart(copy=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a read-only frame: the receiver's tensor is zero-copy
            return torch.from_numpy(np.frombuffer(body.buffer, dtype=np.float32))

    def close(self) -> None:
        self.socket.close(linger=0)
        self.context.term()


class TinyMessage(Mode):
    """The floor: one wake-up, a 1-byte message over a Pipe (ignores the tensor)."""

    name = "floor: one wake-up (1-byte Pipe message)"
    carries = False

    def send(self, tensor: torch.Tensor) -> None:
        self.conn.send_bytes(b"x")

    def recv(self) -> torch.Tensor:
        self.conn.recv_bytes()
        return torch.empty(0)


class BareZeroCopy(Mode):
    """The floor of any zero-copy handoff in Python: the producer wrote into a segment both sides
    mapped beforehand; the message is an element count; the receiver wraps the mapping with
    ``torch.frombuffer``. No checks, no slot lifetime: what no real transport can go below."""

    name = "floor: bare zero-copy (premapped segment, count over a Pipe)"
    allocates = True

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self.path: str | None = None  # the sender's segment, which it unlinks
        self.mapping: mmap.mmap | None = None

    def prepare(self, template: torch.Tensor) -> torch.Tensor:
        tensor = self._segment(template)
        _fill(tensor, template)
        return tensor

    def _segment(self, template: torch.Tensor) -> torch.Tensor:
        """A float32 tensor over the segment, as many elements as ``template``: the segment is made
        (and mapped by the receiver, before the timed send) when the one there is too small."""
        nbytes = template.numel() * 4
        if self.mapping is None or len(self.mapping) < nbytes:
            self.close()
            self.path = f"/dev/shm/twbench-{os.getpid()}-{nbytes}"
            self.mapping = _map(self.path, nbytes, create=True)
            self.conn.send_bytes(self.path.encode())
        return torch.frombuffer(self.mapping, dtype=torch.float32, count=template.numel())

    def send(self, tensor: torch.Tensor) -> None:
        self.conn.send_bytes(tensor.numel().to_bytes(8, "little"))

    def recv(self) -> torch.Tensor:
        data = self.conn.recv_bytes()
        while len(data) != 8:  # a new segment's path: map it, then wait for the message itself
            self.mapping = None  # the previous tensor is gone: its mapping closes with it
            self.mapping = _map(data.decode(), 0, create=False)
            data = self.conn.recv_bytes()
        return torch.frombuffer(self.mapping, dtype=torch.float32, count=int.from_bytes(data, "little"))

    def close(self) -> None:
        self.mapping = None
        if self.path is not None:
            os.unlink(self.path)
            self.path = None


class BareOneCopy(BareZeroCopy):
    """The floor of any one-copy handoff in Python, in the transfers' own conditions: the sender
    copies the tensor it holds into a segment both sides mapped beforehand (one ``np.copyto``, on
    one thread), then sends an element count; the receiver wraps the mapping. Unlike the warm
    back-to-back ``np.copyto`` row, its copy runs where the transfers' copies run: in a process
    that waited for its message, after the producer's own writes."""

    name = "floor: bare one copy (np.copyto into a premapped segment)"
    allocates = False

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self._into: torch.Tensor | None = None  # the segment's tensor, for the next send

    def prepare(self, template: torch.Tensor) -> torch.Tensor:
        self._into = self._segment(template)
        return template

    def send(self, tensor: torch.Tensor) -> None:
        assert self._into is not None
        _fill(self._into, tensor)  # the one copy, timed here
        super().send(tensor)

    def close(self) -> None:
        self._into = None
        super().close()


def _map(path: str, nbytes: int, create: bool) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
    try:
        if create:
            os.ftruncate(fd, nbytes)
        return mmap.mmap(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


TENSORWIRE = [
    TwInline,
    TwShmCopy,
    TwShmBorrow,
    TwPool,
    TwPoolNamed,
    TwPoolZeroCopy,
    TwPoolZeroCopyNamed,
    TwQueue,
    TwDefault,
]
# the pool modes by kind: (memfd-backed, named-segment) twins, run interleaved by tools.bench.backing
POOL_TWINS = {"one copy": (TwPool, TwPoolNamed), "pool-allocated": (TwPoolZeroCopy, TwPoolZeroCopyNamed)}
PEERS = [PickleInband, PickleOobShm, TorchQueue, MsgspecInline, Zmq, ReferenceStyle]
FLOORS = [TinyMessage, BareZeroCopy, BareOneCopy]
MODES = {mode.name: mode for mode in [*TENSORWIRE, *PEERS, *FLOORS]}
