"""Time from a broker's start to its first answer.

    .venv/bin/python bench/startup.py --addr 127.0.0.1:9092 [--rounds 3] [--kill] -- COMMAND ARGS...

Starts COMMAND (a broker in the foreground), asks ADDR for cluster metadata
every 5 ms over a plain socket (Metadata v4 with no topics: what a client's
bootstrap needs), and prints the time from the spawn to the first answer
that lists a broker. The broker is then stopped with SIGTERM (waited for,
up to 60 s; with --kill, SIGKILL: the next start recovers as after a
crash) and started again, --rounds times: the first round of a fresh
data directory includes its creation, the later ones a start over what the
earlier rounds left. For Kafka, COMMAND is `bench/kafka.sh start ...
--foreground` (the script resolves nothing again once its classpath file
exists, so its own share is a few milliseconds of bash).
"""
import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import time


def metadata_answered(host, port):
    client = b"startup"
    body = struct.pack(">hhih", 3, 4, 1, len(client)) + client + struct.pack(">ib", 0, 0)
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            buf = b""
            while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
                chunk = s.recv(65536)
                if not chunk:
                    return False
                buf += chunk
    except OSError:
        return False
    corr, _throttle, nbrokers = struct.unpack(">iii", buf[4:16])
    return corr == 1 and nbrokers >= 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--kill", action="store_true", help="stop with SIGKILL, not SIGTERM")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("give the broker's command after --")
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    if metadata_answered(host, port):
        sys.exit(f"startup.py: something already answers on {a.addr}")
    times = []
    for r in range(1, a.rounds + 1):
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            while not metadata_answered(host, port):
                if p.poll() is not None:
                    sys.exit(f"startup.py: the broker exited ({p.returncode}) before it answered")
                if time.monotonic() - t0 > a.timeout:
                    sys.exit(f"startup.py: no answer within {a.timeout:.0f} s")
                time.sleep(0.005)
            ms = (time.monotonic() - t0) * 1000
            times.append(ms)
            print(f"round {r}: first answer after {ms:.0f} ms", flush=True)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL if a.kill else signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        # Every process of the broker's session (a JVM under its start
        # script, say) is gone before the next round starts: a broker still
        # shutting down holds its data directory's lock.
        while True:
            try:
                os.killpg(p.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
    times.sort()
    print(f"start to first answer: median {times[len(times) // 2]:.0f} ms (min {times[0]:.0f}, max {times[-1]:.0f})")


if __name__ == "__main__":
    main()
