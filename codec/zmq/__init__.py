"""Typed messages over ZeroMQ (the ``zmq`` extra: ``pip install tensorwire[zmq]``).

``Channel`` wraps a socket the caller made (PUSH/PULL, PAIR, DEALER/ROUTER, PUB/SUB, XPUB/XSUB) and
keeps the rule ZeroMQ's zero-copy sends need: every frame handed over without a copy stays alive and
unchanged until ZeroMQ lets go of it. Large tensors travel through the channel's shared-memory
transport when the peer is on this host, inline otherwise. ``Client`` and ``Server`` are RPC over
DEALER/ROUTER with the built-in ``rpc.Request`` / ``rpc.Result`` envelopes::

    import zmq
    import tensorwire as tw
    from tensorwire.builtins import REGISTRY
    from tensorwire.zmq import Channel

    socket = zmq.Context.instance().socket(zmq.PUSH)
    channel = Channel(socket, REGISTRY, transport=tw.transports.ShmTransport())
    socket.connect("ipc:///tmp/engine")  # after the channel: it sets the socket's MAXMSGSIZE
    channel.send(message)          # returns once ZeroMQ holds no frame of it: tensors may change

See ``tensorwire.zmq._channel`` for the frame layout and the lifetime rule.
"""

from tensorwire.zmq._channel import COPY_BELOW, MAX_TRIALS, Channel
from tensorwire.zmq._incoming import HELLO
from tensorwire.zmq._locality import host_token
from tensorwire.zmq._rpc import Client, Handler, Server
from tensorwire.zmq._sent import AbortedWhileHeldError, Sent, StillHeldError

__all__ = [
    "COPY_BELOW",
    "HELLO",
    "MAX_TRIALS",
    "AbortedWhileHeldError",
    "Channel",
    "Client",
    "Handler",
    "Sent",
    "Server",
    "StillHeldError",
    "host_token",
]
