"""The transport base class (optional hooks with no-op defaults, a context manager) and third-party
transports found through the ``tensorwire.transports`` entry-point group of an installed distribution."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

import tensorwire as tw
from tensorwire.builtins import REGISTRY, diffusion
from tensorwire.transports import Handle, Transport
from tensorwire.transports.base import Buffer
from tests.conftest import run_in

PLUGIN = textwrap.dedent(
    '''
    """A transport that keeps buffers in a dict of this process (a test double of a real one)."""
    from __future__ import annotations

    from typing import ClassVar

    from tensorwire.transports import Handle, Transport

    STORE: dict[int, bytes] = {}


    class PigeonHandle(Handle, tag="pigeon"):
        key: int


    class PigeonTransport(Transport):
        name: ClassVar[str] = "pigeon"
        handle_types: ClassVar[tuple[type[Handle], ...]] = (PigeonHandle,)

        def export(self, data, frames):
            key = len(STORE)
            STORE[key] = bytes(data)
            return PigeonHandle(key=key)

        def verify(self, handles, frames):
            for handle in handles:
                if handle.key not in STORE:
                    raise tw.DecodeError(f"no pigeon carries {handle.key}")

        def import_(self, handle, frames, nbytes, *, borrow):
            return bytearray(STORE[handle.key])

        def release(self, handle):
            STORE.pop(handle.key, None)

        def close(self):
            STORE.clear()


    class NotATransport:
        name = "impostor"

    import tensorwire as tw
    '''
)
USE = textwrap.dedent(
    """
    import json, sys, torch
    import tensorwire as tw
    from tensorwire.builtins import REGISTRY, diffusion

    try:
        cls = tw.transports.by_name("pigeon")
    except ValueError as exc:
        print(json.dumps({"error": str(exc)}))
        sys.exit(0)
    with cls() as pigeon:
        frames = tw.Encoder(pigeon, tw.EncodeOptions(inline_threshold=1, embed_threshold=0)).encode(
            diffusion.Output(output=torch.arange(6.0))
        )
        out = tw.Decoder(REGISTRY, [pigeon]).decode(frames).output
    print(json.dumps({"names": sorted(tw.transports.available()), "module": cls.__module__, "out": out.tolist()}))
    """
)


def _install(site: Path, entry: str) -> None:
    """A distribution on ``site``: its module and a dist-info whose entry point is ``entry``."""
    (site / "pigeon_transport.py").write_text(PLUGIN)
    info = site / "pigeon_transport-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pigeon-transport\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tensorwire.transports]\n{entry}\n")
    (info / "RECORD").write_text("")


def _use(site: Path) -> dict[str, Any]:
    return run_in(site, USE)


def test_an_installed_distribution_s_transport_is_found_and_carries_a_message(tmp_path: Path) -> None:
    _install(tmp_path, "pigeon = pigeon_transport:PigeonTransport")
    found = _use(tmp_path)
    assert found == {
        "names": ["cuda_shm", "inline", "pigeon", "queue", "shm"],
        "module": "pigeon_transport",
        "out": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
    }


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("pigeon = pigeon_transport:NotATransport", "is not a tensorwire.transports.Transport subclass"),
        ("pigeon = pigeon_transport:Missing", "failed to load: AttributeError"),
        ("shm = pigeon_transport:PigeonTransport", "'shm' is a built-in transport"),
        ("dove = pigeon_transport:PigeonTransport", "its class is named 'pigeon'"),
    ],
)
def test_a_broken_entry_point_is_named_in_the_error(tmp_path: Path, entry: str, error: str) -> None:
    _install(tmp_path, entry)
    message = _use(tmp_path)["error"]
    name, value = (part.strip() for part in entry.split("="))
    assert message.startswith(f"entry point {name!r} ({value}) of group 'tensorwire.transports'"), message
    assert error in message


class _Minimal(Transport):
    """Only the required methods: the hooks are the base class's."""

    name: ClassVar[str] = "minimal"
    handle_types: ClassVar[tuple[type[Handle], ...]] = tw.transports.InlineTransport.handle_types
    closed = 0

    def __init__(self) -> None:
        self._inline = tw.transports.InlineTransport()

    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        return self._inline.export(data, frames)

    def verify(self, handles: Sequence[Handle], frames: Sequence[Buffer]) -> None:
        self._inline.verify(handles, frames)

    def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
        return self._inline.import_(handle, frames, nbytes, borrow=borrow)

    def release(self, handle: Handle) -> None:
        self._inline.release(handle)

    def close(self) -> None:
        type(self).closed += 1


def test_a_transport_with_only_the_required_methods_sends_host_tensors_and_closes_on_exit() -> None:
    with _Minimal() as minimal:
        assert minimal.begin_message() is None  # type: ignore[func-returns-value]  # the default does nothing
        assert minimal.export_storage(torch.zeros(4, dtype=torch.uint8), 0, 4, []) is None
        assert minimal.export_device(torch.zeros(4, dtype=torch.uint8), 0, 4, []) is None
        assert minimal.device_runtime() is None  # stage with torch's own CUDA runtime
        with minimal.importing() as entered:
            assert entered is None
        encoder = tw.Encoder(minimal, tw.EncodeOptions(inline_threshold=1, embed_threshold=0))
        frames = encoder.encode(diffusion.Output(output=[torch.ones(3), torch.arange(4)]))
        got = tw.Decoder(REGISTRY).decode(frames).output
    assert [t.tolist() for t in got] == [[1.0, 1.0, 1.0], [0, 1, 2, 3]]
    assert _Minimal.closed == 1


class _Recording(_Minimal):
    """Records what the encoder hands it; no ``export_storage`` of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, Any]] = []

    def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
        self.calls.append(("export", (type(data).__name__, data.nbytes)))
        return super().export(data, frames)


class _Storages(_Recording):
    """Takes host storages (``export_storage``) for buffers of a multiple of 8 bytes, declines the others."""

    def export_storage(self, storage: Any, start: int, nbytes: int, frames: list[Buffer]) -> Handle | None:
        self.calls.append(("storage", (storage.dtype, storage.dim(), nbytes)))
        if nbytes % 8:
            return None  # declined: the encoder hands it the byte view instead
        return super().export(memoryview(storage[start : start + nbytes].numpy()), frames)


def test_the_imports_of_a_message_of_several_buffers_run_in_its_transports_importing_context() -> None:
    """Once per message of several buffers, around all of their imports (a transport whose imports
    may wait gives them one budget there); a message of one buffer imports it alone."""
    import contextlib

    events: list[str] = []

    class _Watched(_Minimal):
        @contextlib.contextmanager
        def importing(self) -> Iterator[None]:
            events.append("enter")
            yield
            events.append("exit")

        def import_(self, handle: Handle, frames: Sequence[Buffer], nbytes: int, *, borrow: bool | None) -> Buffer:
            events.append("import")
            return super().import_(handle, frames, nbytes, borrow=borrow)

    with _Watched() as watched:
        encoder = tw.Encoder(watched, tw.EncodeOptions(inline_threshold=1, embed_threshold=0))
        decoder = tw.Decoder(REGISTRY, transports=[watched])
        got = decoder.decode(encoder.encode(diffusion.Output(output=[torch.ones(3), torch.arange(4)]))).output
        assert [t.tolist() for t in got] == [[1.0, 1.0, 1.0], [0, 1, 2, 3]]
        assert events == ["enter", "import", "import", "exit"]
        events.clear()
        assert decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(2)))).output.tolist() == [1.0, 1.0]
        assert events == ["import"]


def test_only_a_transport_that_defines_export_storage_is_offered_storages() -> None:
    message = diffusion.Output(output=[torch.ones(3), torch.arange(4)])  # 12 and 32 bytes
    options = tw.EncodeOptions(inline_threshold=1, embed_threshold=0)
    plain, storages = _Recording(), _Storages()
    for transport in (plain, storages):
        got = tw.Decoder(REGISTRY).decode(tw.Encoder(transport, options).encode(message)).output
        assert [t.tolist() for t in got] == [[1.0, 1.0, 1.0], [0, 1, 2, 3]]
    assert plain.calls == [("export", ("memoryview", 12)), ("export", ("memoryview", 32))]
    assert storages.calls == [
        ("storage", (torch.uint8, 1, 12)),
        ("export", ("memoryview", 12)),  # declined, then its byte view
        ("storage", (torch.uint8, 1, 32)),
        ("export", ("memoryview", 32)),  # (what this transport's export_storage itself calls)
    ]


def test_a_transport_missing_a_required_method_cannot_be_made() -> None:
    class Half(Transport):
        name: ClassVar[str] = "half"
        handle_types: ClassVar[tuple[type[Handle], ...]] = ()

        def export(self, data: memoryview, frames: list[Buffer]) -> Handle:
            raise NotImplementedError

    with pytest.raises(TypeError, match=r"Can't instantiate abstract class Half"):
        Half()  # type: ignore[abstract]


def _built_in(name: str, directory: Path) -> Transport:
    import torch.multiprocessing as tmp

    from tensorwire import transports
    from tests.cuda_fakes import FakeCudaRuntime

    if name == "inline":
        return transports.InlineTransport()
    if name == "shm":
        return transports.ShmTransport(directory)
    if name == "cuda_shm":
        return transports.CudaShmTransport(directory, runtime=FakeCudaRuntime())
    return transports.QueueTransport(tmp.get_context("spawn").Queue())


@pytest.mark.parametrize("name", ["inline", "shm", "cuda_shm", "queue"])
def test_a_built_in_transport_refuses_a_handle_of_another_kind_by_name_and_its_release_is_no_error(
    tmp_path: Path, name: str
) -> None:
    """``verify`` and ``import_`` of another transport's handle were an ``AssertionError`` (and,
    under ``python -O``, an ``AttributeError`` or worse); the queue's ``release`` of one was too."""
    from tensorwire import transports

    transport = _built_in(name, tmp_path)
    foreign: Handle = (
        transports.QueueHandle(sender="s", message=1, tensor=0)
        if name in ("shm", "cuda_shm")
        else transports.ShmHandle(name="tw-1-a-1", capability=bytes(16))
    )
    frames = [b"", b"frame"]
    error = f"the {name} transport does not read {type(foreign).__name__}s"
    try:
        with pytest.raises(tw.DecodeError) as info:
            transport.verify([foreign], frames)
        assert (info.value.message, info.value.path) == (error, None)
        with pytest.raises(tw.DecodeError) as info:
            transport.import_(foreign, frames, 5, borrow=False)
        assert (info.value.message, info.value.path) == (error, None)
        transport.release(foreign)  # names nothing of this transport's
        transport.release_all([foreign])
    finally:
        transport.close()
