"""A process that sends and receives through one transport, then simply exits, leaves nothing.

This is the README's single-process pattern: encode, decode, keep the message, exit normally
(no ``close()``), for every backing; the received message is still alive at exit.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.wire_helpers import segments_of

SCRIPT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    import torch
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion
    shm = transports.ShmTransport({options})
    enc = tw.Encoder(transport=shm)
    dec = tw.Decoder(REGISTRY, transports=[shm])
    video = torch.zeros(1, 3, 8, 64, 64, dtype=torch.bfloat16)
    out = dec.decode(enc.encode(diffusion.Output(output=(video, {{"audio": torch.ones(300_000)}}))))
    again = dec.decode(tw.split(tw.join(enc.encode(diffusion.Output(output=video)))))
    print(os.getpid(), out.output[1]["audio"].shape, again.output.shape)
    """
)


@pytest.mark.parametrize("options", ["", "backing='named'", "pool=False", "pool=False, backing='named'"])
def test_send_receive_and_exit_leaves_no_segment(options: str) -> None:
    script = SCRIPT.format(repo=str(REPO), options=options)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    pid = int(result.stdout.split()[0])
    assert "torch.Size([300000])" in result.stdout
    assert segments_of(pid) == []


THREADS_AT_EXIT = textwrap.dedent(
    """
    import atexit, os, sys, threading
    sys.path.insert(0, {repo!r})
    import numpy as np
    import torch
    import tensorwire as tw
    from tensorwire import transports
    from tensorwire.builtins import REGISTRY, diffusion
    sys.setswitchinterval(1e-6)
    shm = transports.ShmTransport({options})
    enc = tw.Encoder(transport=shm, options=tw.EncodeOptions(embed_threshold=0, inline_threshold=1))
    dec = tw.Decoder(REGISTRY, transports=[shm])
    sent = [threading.Semaphore(0) for _ in range(4)]
    errors = []

    def loop(i):
        tensor = torch.from_numpy(np.full(20_000, float(i), dtype=np.float32))
        try:
            while True:
                dec.decode(enc.encode(diffusion.Output(output=tensor)))
                sent[i].release()
        except BaseException as exc:
            errors.append(f"{{type(exc).__name__}}: {{exc}}")

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    for s in sent:
        for _ in range(20):
            s.acquire()
    atexit._run_exitfuncs()  # what exit runs, the threads still sending
    for thread in threads:
        thread.join(60)
    print(sum(t.is_alive() for t in threads))
    print("\\n".join(errors))
    sys.stdout.flush()
    os._exit(0)  # (torch aborts when the interpreter ends while threads are inside it)
    """
)


@pytest.mark.parametrize("options", ["", "backing='named', directory=sys.argv[1]"])
def test_threads_sending_as_the_process_exits_are_refused_with_a_transport_error(options: str) -> None:
    """What a pool lets go of at exit was let go under the threads still sending through it (daemon
    threads run until the interpreter ends): their sends failed with a ``ValueError`` of a released
    page. The pool is closed to them first, as ``close()`` closes it: each send is refused with
    ``TransportError`` (a slot taken, or one not yet handed over), and no thread goes on sending."""
    script = THREADS_AT_EXIT.format(repo=str(REPO), options=options)
    directory = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="twtest-exit-"))
    try:
        result = subprocess.run(
            [sys.executable, "-c", script, str(directory)], capture_output=True, text=True, timeout=120, check=False
        )
    finally:
        shutil.rmtree(directory)
    assert result.returncode == 0, result.stderr[-2000:]
    alive, *errors = result.stdout.splitlines()
    assert alive == "0"
    assert len(errors) == 4
    closed = r"TransportError: \[Errno 9\] the shared-memory pool "
    closed += r"(is closed|was closed before pool slot \S+ was handed over)"
    for error in errors:
        assert re.fullmatch(closed, error), error
