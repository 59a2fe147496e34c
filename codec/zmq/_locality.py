"""Whether a peer shares this process's shared memory: a host token, and what an endpoint says.

Two processes can open each other's shared-memory segments when they see the same ``/dev/shm``
(same kernel boot, same IPC and mount namespaces), run as the same user and, for memfd backing,
see each other's ``/proc/<pid>`` (same PID namespace). The host token is a digest of exactly
those facts: equal tokens mean the peer can open what this process shares. It names no host,
user or process (only a SHA-256 of them), but it is no secret: every hello carries it, so a remote
peer that has received one message can echo it. A peer that lies about it can only make the
sender use shared memory it cannot open (pinned until the pool's claim timeout: SECURITY.md).
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

__all__ = ["TOKEN_BYTES", "endpoint_is_local", "host_token"]

TOKEN_BYTES = 16


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes().strip()
    except OSError:
        return b"?"


def _namespace(kind: str) -> bytes:
    try:
        return os.readlink(f"/proc/self/ns/{kind}").encode()
    except OSError:
        return b"?"


def _shm_device() -> bytes:
    try:
        st = os.stat("/dev/shm")
    except OSError:
        return b"?"
    return f"{st.st_dev}:{st.st_ino}".encode()


@cache
def host_token() -> bytes:
    """16 bytes that are equal for two processes exactly when they can open each other's segments
    (boot id, IPC, mount and PID namespaces, ``/dev/shm``'s device and inode, user id)."""
    facts = [
        _read("/proc/sys/kernel/random/boot_id"),
        _namespace("ipc"),
        _namespace("mnt"),
        _namespace("pid"),
        _shm_device(),
        str(os.getuid()).encode(),
    ]
    return hashlib.sha256(b"tensorwire-host\0" + b"\0".join(facts)).digest()[:TOKEN_BYTES]


def endpoint_is_local(endpoint: str) -> bool:
    """Whether ``endpoint`` can only join processes of this host: ``ipc://`` and ``inproc://``."""
    return endpoint.startswith(("ipc://", "inproc://"))
