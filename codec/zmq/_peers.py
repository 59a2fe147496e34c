"""What a ``Channel`` knows of its peers and how a message goes to each: what each peer's hello
said (another host; this host, over a network connection: its word only; this host, over
``ipc://`` or ``inproc://``), which peers are on trial (a message of theirs in shared memory
waiting for its claim) and which have proven they open this process's shared memory by claiming
one, and from that whether a message goes inline, through shared memory or on trial. The channel
keeps the state (``_peers``, ``_trials``, ``_proven``); these functions read and update it, once
per message sent (a broadcast: once per peer) or received at most.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import zmq

from tensorwire.transports.inline import InlineHandle
from tensorwire.zmq._locality import endpoint_is_local
from tensorwire.zmq._sockets import over_network

if TYPE_CHECKING:
    from tensorwire.zmq._channel import Channel

__all__ = ["learn", "route_for", "settle", "start_trial"]

_MAX_PEERS = 4096  # peers whose locality a ROUTER channel remembers (the oldest is forgotten first)
_INLINE, _SHARED, _TRIAL = 0, 1, 2  # how a message goes to its peer (``route_for``)
_FAR, _SAYS_NEAR, _NEAR = 0, 1, 2  # what a peer's hello says: another host; this host, over a network
# connection (its word only); this host, over ipc:// or inproc:// (``learn``)


def route_for(channel: Channel, peer: bytes | None) -> int:
    """How a message goes to ``peer`` (None: the socket's peers): ``_INLINE``; ``_SHARED``, when it
    can open this process's shared memory (``same_host=True``; a hello from this host that came
    over ipc:// or inproc://, or from a peer that has claimed a message; nothing heard, an
    ipc:// or inproc:// endpoint, and no peer ever forgotten: past ``_MAX_PEERS`` an unknown
    peer may be a forgotten one, whose hello said otherwise); ``_TRIAL``, when only its hello
    says so (over a network connection): through shared memory if no message of its is on trial
    (waiting for its claim) and fewer than ``max_trials`` peers have one, otherwise inline
    (``withheld``)."""
    if channel._shared is None:
        return _INLINE
    if channel._trials:  # each looked at before this send can take a slot a claimed one left
        settle(channel)
    if channel.same_host is not None:
        return _SHARED if channel.same_host else _INLINE
    said = channel._peers.get(peer)
    if said is None:  # nothing heard: the endpoint tells, unless the peer may have been forgotten
        if channel._forgot:  # (a flood of routing ids pushed it out: it may have been on trial, or remote)
            return _INLINE
        if not channel._endpoint:
            channel._endpoint = channel._last_endpoint()
        return _SHARED if endpoint_is_local(channel._endpoint) else _INLINE
    if said == _FAR:
        return _INLINE
    if said == _NEAR or peer in channel._proven:
        return _SHARED
    if peer in channel._trials or len(channel._trials) >= channel.max_trials:
        channel.withheld += 1
        return _INLINE
    return _TRIAL


def settle(channel: Channel) -> None:
    """End the trials whose message was claimed (its peer is proven: it opened this process's
    shared memory) or can no longer be; those still waiting stay. A message is judged by its
    first shared-memory buffer: a receiver claims a message's buffers in order, as it decodes."""
    assert channel.transport is not None
    claimed = channel.transport.claimed
    for peer, handle in list(channel._trials.items()):
        outcome = claimed(handle)
        if outcome is None:
            continue
        del channel._trials[peer]
        if outcome:
            channel._proven[peer] = None
            if len(channel._proven) > _MAX_PEERS:
                channel._proven.popitem(last=False)


def start_trial(channel: Channel, peer: bytes | None, frames: list[Any]) -> None:
    """Put ``peer`` on trial with the message just sent to it, if it has a shared-memory buffer."""
    for _, handle in channel._decoder.table.decode(frames[0]).buffers:
        if not isinstance(handle, InlineHandle):
            channel._trials[peer] = handle
            return


def learn(channel: Channel, peer: bytes | None, local: bool, frame: zmq.Frame) -> None:
    """Remember what ``peer``'s hello (in ``frame``) said, and whether it came over a network
    connection (then it is only its word). A ROUTER knows which peer it sends to, a PAIR has one;
    any other socket may route a message to a peer it has not heard from, so there a hello can
    only take shared memory away (``same_host=True`` or an ``ipc://`` endpoint gives it)."""
    if not channel._router and channel._type != zmq.PAIR and local:
        return
    key = peer if channel._router else None
    said = _FAR
    if local:  # looked at in every hello: a peer picks its routing id, and one that connects over TCP
        # under the id of a peer that came over ipc:// (since gone) has only its word
        said = _SAYS_NEAR if over_network(frame) else _NEAR
    channel._peers[key] = said
    channel._peers.move_to_end(key)
    if len(channel._peers) > _MAX_PEERS:
        channel._peers.popitem(last=False)
        channel._forgot = True
