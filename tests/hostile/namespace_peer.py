"""A peer in another pid namespace (``tests/hostile/test_pid_namespaces.py``): a sender or a
receiver with ``backing="named"`` in ``directory``, driven by lines on stdin, answering on stdout.

    python namespace_peer.py sender DIRECTORY    # "send" -> "frames <base64>..."; "slots" -> its pool's slots;
                                                 # "exit" -> gone at once, nothing closed (as if killed)
    python namespace_peer.py receiver DIRECTORY  # "frames <base64>..." -> "held [first elements]" (keeps each)
    python namespace_peer.py one-shots DIRECTORY # a sender with no pool: each buffer a one-shot segment
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

import torch

import tensorwire as tw
from tensorwire import transports
from tensorwire.builtins import REGISTRY, diffusion

OOB = tw.EncodeOptions(embed_threshold=0, inline_threshold=1)  # every tensor through shared memory


def frames_line(frames: list[Any]) -> str:
    return "frames " + " ".join(base64.b64encode(bytes(memoryview(f))).decode() for f in frames)


def read_frames(line: str) -> list[bytes]:
    return [base64.b64decode(part) for part in line.split()[1:]]


def main() -> None:
    role, directory = sys.argv[1], sys.argv[2]
    shm = transports.ShmTransport(directory, backing="named", pool=role != "one-shots")
    if role == "one-shots":
        role = "sender"
    print("pid", os.getpid(), flush=True)
    kept: list[torch.Tensor] = []
    decoder = tw.Decoder(REGISTRY, transports=[shm])
    encoder = tw.Encoder(transport=shm, options=OOB)
    for line in sys.stdin:
        command = line.split(maxsplit=1)[0] if line.strip() else ""
        if role == "sender" and command == "send":
            print(frames_line(encoder.encode(diffusion.Output(output=torch.arange(1024.0)))), flush=True)
        elif role == "sender" and command == "slots":
            assert shm.pool is not None
            print("slots", len(shm.pool.slots()), flush=True)
        elif role == "sender" and command == "exit":
            os._exit(0)
        elif role == "receiver" and command == "frames":
            kept.append(decoder.decode(read_frames(line)).output)
            print("held", [float(t[0]) for t in kept], flush=True)
        else:
            break
    shm.close()


if __name__ == "__main__":
    main()
