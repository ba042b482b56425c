"""Request priorities (``load.priorities``, tracker/spec/load_priorities.py): which request of
the load goes at which of Triton's priority levels, and the level written into the request.

The load's requests are one pass over its payloads (in load.repeat's order, repeats.py). The
pass is lengthened to at least :data:`MIN_PASS` requests by cycling it (the same requests in
the same order), then every position gets a level: ``round(share x length)`` positions per
level (largest remainder), in a seeded shuffle. So every pass sends each level its share,
exactly. A closed-loop slot sends positions ``k, k + slots, ...`` (kinds/load_kind.py
``closed_slot``): the shuffle gives every such stride about the shares, where a regular
pattern (1, 2, 1, 2, ...) would send all of a slot's requests at one level whenever the stride
is even, and a closed loop would then serve the faster level more often than its share. With
one distinct request (random data, the default) a pass is :data:`MIN_PASS` long, a prime: a
slot's stride then shares no factor with it, so after ``slots`` passes every slot has sent
every position, at exactly the shares.

The level goes into the request as the parameter ``priority`` (what tritonclient's
``infer(..., priority=N)`` sends): appended to the serialized gRPC ``ModelInferRequest``
(protobuf merges the parameters map), or first in the HTTP JSON header's parameters. The same
bytes tell the load kind which level an answered request was sent at (:func:`level_of`). A
payload is copied once per level it is sent at, not once per position.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Payload = Any

MIN_PASS = 1009  # a prime (module text)
SEED = 0


def level_order(n: int, shares: Mapping[int, float]) -> list[int]:
    """The level of each of ``n`` positions: each level's share of them (largest remainder),
    shuffled with a fixed seed."""
    levels = list(shares)
    exact = [shares[level] * n for level in levels]
    counts = [int(x) for x in exact]
    short = n - sum(counts)
    for i in sorted(range(len(levels)), key=lambda i: counts[i] - exact[i])[:short]:
        counts[i] += 1
    order = np.repeat(np.array(levels, dtype=np.int64), counts)
    np.random.default_rng(SEED).shuffle(order)
    return [int(x) for x in order]


@functools.cache
def grpc_mark(level: int) -> bytes:
    """A serialized ``ModelInferRequest`` holding only the parameter ``priority``."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest()
    req.parameters["priority"].uint64_param = level
    return bytes(req.SerializeToString())


def http_mark(level: int) -> bytes:
    """How an HTTP request body of this module's starts at ``level``."""
    return b'{"parameters":{"priority":%d' % level


def with_priority(payload: Payload, level: int, protocol: str) -> Payload:
    """``payload`` (a transport's pre-built request) sent at priority ``level``."""
    if protocol == "grpc":
        return payload + grpc_mark(level)
    body, json_size = payload
    size = json_size if json_size is not None else len(body)
    header = json.loads(body[:size])
    params = {"priority": level, **{k: v for k, v in header.pop("parameters", {}).items()
                                    if k != "priority"}}
    text = json.dumps({"parameters": params, **header}, separators=(",", ":")).encode()
    return (text + body[size:], len(text) if json_size is not None else None)


def prioritized(payloads: Sequence[Payload], shares: Mapping[int, float],
                protocol: str) -> list[Payload]:
    """One pass of the load with each request at its level (module text)."""
    n = len(payloads)
    if n == 0:
        return []
    copies: dict[tuple[int, int], Payload] = {}
    out = []
    for k, level in enumerate(level_order(n * -(-MIN_PASS // n), shares)):
        payload = payloads[k % n]
        key = (id(payload), level)
        if key not in copies:
            copies[key] = with_priority(payload, level, protocol)
        out.append(copies[key])
    return out


def level_of(payload: Payload, levels: Sequence[int], protocol: str) -> int:
    """The level a request of :func:`prioritized` is sent at; 0 for any other request."""
    if protocol == "grpc":
        for level in levels:
            if payload.endswith(grpc_mark(level)):
                return level
        return 0
    body = payload[0]
    for level in levels:
        mark = http_mark(level)
        if body.startswith(mark) and body[len(mark):len(mark) + 1] in (b",", b"}"):
            return level
    return 0
