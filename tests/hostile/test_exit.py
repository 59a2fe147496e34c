"""A process that sends and receives through one transport, then simply exits, leaves nothing.

This is the README's single-process pattern: encode, decode, keep the message, exit normally
(no ``close()``), for every backing; the received message is still alive at exit.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
