"""The decoder configurations a case may name (receiver backing, decode options, and whether the
built-in types are the generated ones or those ``tw.load_schemas`` makes from the same schemas)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorwire as tw
from tensorwire import builtins, transports
from tensorwire.builtins import REGISTRY
from tools.fuzz.seeds import PLAIN

__all__ = ["CONFIGS", "NAMED", "SAFE", "Reading", "build"]


@dataclass(frozen=True)
class Reading:
    """One way of reading: the receiving transport's backing and the ``DecodeOptions``."""

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
)
NAMED = tuple(i for i, c in enumerate(CONFIGS) if c.backing == "named")  # these also map named slots
SAFE = tuple(i for i, c in enumerate(CONFIGS) if c.options.limits is not _TIGHT)  # every valid seed decodes


def build(directory: Path) -> tuple[list[tw.Decoder], list[transports.ShmTransport]]:
    """A decoder per configuration, over one receiving transport per backing (in ``directory``); each
    reads the built-in types and those of ``seeds.PLAIN``."""
    receivers = {
        backing: transports.ShmTransport(directory, pool=False, backing=backing, claim_timeout=3600.0)
        for backing in ("memfd", "named")
    }
    loaded = tw.load_schemas(Path(builtins.__file__).parent / "schemas")  # run-time types of the same schemas
    registries = {flag: tw.Registry([*(loaded if flag else REGISTRY), *PLAIN]) for flag in (False, True)}
    decoders = [
        tw.Decoder(registries[c.loaded], transports=[receivers[c.backing]], options=c.options, device=c.device)
        for c in CONFIGS
    ]
    return decoders, list(receivers.values())
