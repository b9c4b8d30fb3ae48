"""The loopback ports services and tests are given: free, never given twice, and never where the
kernel picks a connection's source port (a replica restarting on its port found it taken)."""

from __future__ import annotations

import random
import socket

from clawgym_app.runtime.services import PORTS_BELOW, PORTS_FROM, ephemeral_ports, free_port


def test_ports_are_free_distinct_and_outside_the_kernels_ephemeral_range() -> None:
    ephemeral = ephemeral_ports()
    assert ephemeral.start > PORTS_FROM, "this machine's ephemeral range leaves room below it"
    firsts = [free_port(4) for _ in range(50)]
    given = [p + i for p in firsts for i in range(4)]
    assert len(set(given)) == len(given), "no port is given twice, not even inside another's span"
    assert all(PORTS_FROM <= p < min(PORTS_BELOW, ephemeral.start) for p in given), sorted(given)
    for port in given[::4] + given[3::4]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # raises where the port was not free


def test_a_port_in_use_is_never_given() -> None:
    """Ports held by sockets of their own (not handed out by `free_port`, so only its bind check
    keeps it off them): 200 draws from the ~10,000 would hit a few of 300 held ones if it did not."""
    draw = random.Random(0)
    below = min(PORTS_BELOW, ephemeral_ports().start)
    held = []
    try:
        for port in draw.sample(range(PORTS_FROM, below), 300):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            s.listen()
            held.append(s)
        in_use = {s.getsockname()[1] for s in held}
        assert len(in_use) > 250, "test setup: most drawn ports must be free to hold"
        assert not in_use & {free_port() for _ in range(200)}
    finally:
        for s in held:
            s.close()
