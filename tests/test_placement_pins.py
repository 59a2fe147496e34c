"""Pool mappings a receiver keeps registered for device copies, under threads and across a fork
(through a fake runtime; tests/test_placement.py has the single-thread cases, tests/test_cuda_gpu.py
the real device)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion
from tests.cuda_fakes import FakeCudaRuntime

MiB = 1024 * 1024


def test_threads_placing_at_once_register_each_mapping_once(tmp_path: Path) -> None:
    fake = FakeCudaRuntime()
    shm = transports.ShmTransport(tmp_path, idle_seconds=0)
    encoder = tw.Encoder(transport=shm)
    decoder = tw.Decoder(REGISTRY, transports=[shm], device="cuda:0", runtime=fake)
    failures: list[str] = []
    start = threading.Barrier(4)

    def work(n: int) -> None:
        start.wait()
        for i in range(25):
            value = float(100 * n + i)
            tensor = decoder.decode(encoder.encode(diffusion.Output(output=torch.full((MiB // 4,), value)))).output
            if tensor.untyped_storage().data_ptr() not in fake.device_storages or float(tensor[-1]) != value:
                failures.append(f"thread {n}, message {i}: wrong tensor")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert failures == []
        mapped = shm._reader.mapped
        assert 1 <= mapped <= 4  # at most one slot per thread in flight at once
        assert fake.calls["register"] == mapped and len(fake.registered) == mapped  # once per mapping
        assert fake.calls["copy_to_device"] == 100 and fake.calls["unregister"] == 0
    finally:
        shm.close()
    assert fake.registered == {} and fake.calls["unregister"] == fake.calls["register"]


def test_a_forked_child_never_unregisters_its_parents_mappings(tmp_path: Path) -> None:
    """A forked child holds copies of its parent's mappings, not their registrations: letting go of
    them unregisters nothing, and its own device copies register what they read."""
    fake = FakeCudaRuntime()
    shm = transports.ShmTransport(tmp_path, idle_seconds=0)
    encoder = tw.Encoder(transport=shm)
    decoder = tw.Decoder(REGISTRY, transports=[shm], device="cuda:0", runtime=fake)
    decoder.decode(encoder.encode(diffusion.Output(output=torch.ones(MiB))))
    assert fake.calls["register"] == 1 and len(fake.registered) == 1
    (segment,) = shm._reader._maps.values()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit status
        signal.alarm(20)
        code = 0
        if segment.pin(fake, 4 * MiB):  # the parent's registration is not the child's
            code |= 1
        del segment
        shm._reader.close()  # the inherited mappings go
        if fake.calls["unregister"] != 0:
            code |= 2
        os._exit(code)
    del segment
    _, status = os.waitpid(pid, 0)
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        assert len(fake.registered) == 1 and fake.calls["unregister"] == 0
    finally:
        shm.close()
    assert fake.registered == {} and fake.calls["unregister"] == 1
