"""Processes that fork while their transports are in use: a child never frees, claims or
unlinks what its parent holds, and never waits for a lock a thread of its parent held at the fork.

Each child runs a function under ``signal.alarm`` (a hang ends it with SIGALRM: the test fails
instead of hanging) and reports through its exit status. Children make their tensors from numpy
arrays: torch's OpenMP workers do not survive a fork.
"""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Callable

import numpy as np
import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through shared memory
HUNG = -signal.SIGALRM


def _full(count: int, value: float) -> torch.Tensor:
    return torch.from_numpy(np.full(count, value, dtype=np.float32))


def _fork(check: Callable[[], bool], seconds: int = 10) -> int:
    """Run ``check`` in a forked child; return its pid (``_exit_code`` waits for it)."""
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status, never return
        code = 1
        try:
            signal.alarm(seconds)
            code = 0 if check() else 3
        finally:
            os._exit(code)
    return pid


def _exit_code(pid: int) -> int:
    """The exit code of child ``pid`` (0: its check returned True; ``HUNG``: it hung)."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_child_dropping_an_unsent_empty_tensor_never_frees_its_parents_slot() -> None:
    """A child that inherited an ``empty()`` tensor its parent had not sent yet, and then used the
    pool itself, lets go of its copy: the parent's slot, sent since and claimed, is not freed (a
    send would then reuse it under the receiver's view)."""
    shm = transports.ShmTransport()
    encoder = tw.Encoder(transport=shm, options=OOB)
    decoder = tw.Decoder(REGISTRY, transports=[shm])
    unsent = [shm.empty((100_000,), torch.float32).fill_(1.0)]
    go_r, go_w = os.pipe()

    def child() -> bool:
        os.read(go_r, 1)  # the parent has sent the tensor and holds what it decoded
        encoder.encode(diffusion.Output(output=_full(50_000, 2.0)))  # the child's own pool
        unsent.clear()
        gc.collect()
        return True

    pid = _fork(child)
    held = decoder.decode(encoder.encode(diffusion.Output(output=unsent.pop()))).output
    os.write(go_w, b"1")
    assert _exit_code(pid) == 0
    encoder.encode(diffusion.Output(output=torch.full((100_000,), 7.0)))  # a send of the slot's size
    assert bool((held == 1.0).all())
    del held
    shm.close()
    for fd in (go_r, go_w):
        os.close(fd)
