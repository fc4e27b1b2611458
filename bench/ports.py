"""Ports for the nodes a benchmark starts on this machine."""
import random
import socket


def free_ports(n, host="127.0.0.1"):
    """`n` different ports free on `host`, drawn below the kernel's range
    for the ports of outgoing connections: a port from that range (what
    binding to port 0 answers) can be taken meanwhile by a connection
    leaving from the same address, such as a cluster node's own calls to
    its peers, and the node could not listen there (tests/integration's
    conftest.free_port draws the same way)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        first_outgoing = int(f.read().split()[0])
    ports = []
    while len(ports) < n:
        port = random.randrange(10000, first_outgoing)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        ports.append(port)
    return ports
