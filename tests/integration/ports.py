"""Ports for the nodes a test (or a benchmark, `bench/`) starts on this
machine."""
import random
import socket

_PORTS = random.Random()


def free_port(host="127.0.0.1"):
    """A port free on `host` for a node to listen on, drawn below the
    kernel's range for the ports of outgoing connections: a port from that
    range (what binding to port 0 answers) can be taken meanwhile by a
    connection leaving from the same address (a node's connections to the
    others leave from its own), or still be held by one a killed node left
    behind, and the node could not listen there."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        first_outgoing = int(f.read().split()[0])
    while True:
        port = _PORTS.randrange(10000, first_outgoing)
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port


def free_ports(n, host="127.0.0.1"):
    """`n` different ports from `free_port`."""
    ports = []
    while len(ports) < n:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports
