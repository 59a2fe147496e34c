"""The decoder configurations a case may name (receiver backing, decode options, and whether the
built-in types are the generated ones or those ``tw.load_schemas`` makes from the same schemas).

Every decoder also reads queue handles, through a ``QueueTransport`` over the worker's own queue
(its timeout short: a tensor a forged handle names never comes); the "cuda" backing reads
shared-memory handles through a ``CudaShmTransport`` over ``host_cuda.HostRuntime``."""

from __future__ import annotations

import queue as stdlib_queue
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorwire as tw
from tensorwire import builtins, transports
from tensorwire.builtins import REGISTRY
from tensorwire.transports.base import Transport
from tools.fuzz.host_cuda import HostRuntime
from tools.fuzz.seeds import PLAIN

__all__ = ["CONFIGS", "NAMED", "QUEUE_TIMEOUT", "SAFE", "Reading", "build"]


@dataclass(frozen=True)
class Reading:
    """One way of reading: the receiving transport's backing ("memfd", "named", or "cuda": a memfd
    receiver that is a ``CudaShmTransport``) and the ``DecodeOptions``."""

    backing: str
    options: tw.DecodeOptions
    device: Any = None
    loaded: bool = False  # the built-in types as ``tw.load_schemas`` makes them, not the generated ones


_TIGHT = tw.Limits(
    max_header_bytes=4096,
    max_message_bytes=1 << 20,
    max_tensors=4,
    max_buffers=4,
    max_tensor_bytes=1 << 16,
    max_depth=8,
)
CONFIGS: tuple[Reading, ...] = (
    Reading("memfd", tw.DecodeOptions()),
    Reading("memfd", tw.DecodeOptions(borrow=False)),
    Reading("named", tw.DecodeOptions(borrow=True, copy_readonly=False)),
    Reading("named", tw.DecodeOptions(strict_fingerprint=True)),
    Reading("memfd", tw.DecodeOptions(borrow=True), device="cpu"),
    Reading("named", tw.DecodeOptions(limits=_TIGHT)),
    Reading("memfd", tw.DecodeOptions(), loaded=True),
    Reading("cuda", tw.DecodeOptions()),
)
QUEUE_TIMEOUT = 0.01  # seconds a decode waits for a queue tensor (the worker's are on the queue before it)
NAMED = tuple(i for i, c in enumerate(CONFIGS) if c.backing == "named")  # these also map named slots
SAFE = tuple(i for i, c in enumerate(CONFIGS) if c.options.limits is not _TIGHT)  # every valid seed decodes


def build(directory: Path, queue: Any = None) -> tuple[list[tw.Decoder], list[Transport]]:
    """A decoder per configuration, over one receiving transport per backing (in ``directory``) and
    a queue receiver over ``queue`` (None: a queue of its own); each reads the built-in types and
    those of ``seeds.PLAIN``."""
    receivers: dict[str, transports.ShmTransport] = {
        backing: transports.ShmTransport(directory, pool=False, backing=backing, claim_timeout=3600.0)
        for backing in ("memfd", "named")
    }
    receivers["cuda"] = transports.CudaShmTransport(directory, runtime=HostRuntime(), pool=False, claim_timeout=3600.0)
    queued = transports.QueueTransport(stdlib_queue.Queue() if queue is None else queue, timeout=QUEUE_TIMEOUT)
    loaded = tw.load_schemas(Path(builtins.__file__).parent / "schemas")  # run-time types of the same schemas
    registries = {flag: tw.Registry([*(loaded if flag else REGISTRY), *PLAIN]) for flag in (False, True)}
    decoders = [
        tw.Decoder(registries[c.loaded], transports=[receivers[c.backing], queued], options=c.options, device=c.device)
        for c in CONFIGS
    ]
    return decoders, [*receivers.values(), queued]
