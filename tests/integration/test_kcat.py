"""kcat, built on Debian's librdkafka 2.0.2: an older client against the node."""
import shutil
import subprocess

import pytest

from conftest import create_topic

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def kcat(node, *args, input=None):
    return subprocess.run([KCAT, "-b", node.bootstrap, *args], input=input, capture_output=True,
                          timeout=60, check=True)


def test_kcat_lists_produces_and_consumes(node):
    assert KCAT, "kcat is not installed (.ci/run installs it)"
    create_topic(node.bootstrap, "kc", partitions=2)
    listing = kcat(node, "-L").stdout.decode()
    assert 'topic "kc" with 2 partitions' in listing
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        lines = "".join(f"{codec}:{i}\n" for i in range(100)).encode()
        kcat(node, "-P", "-t", "kc", "-z", codec, "-K", ":", input=lines)
    out = kcat(node, "-C", "-t", "kc", "-e", "-o", "beginning", "-f", "%k=%s\\n").stdout.decode().split()
    expected = [f"{c}={i}" for c in ["none", "gzip", "snappy", "lz4", "zstd"] for i in range(100)]
    assert sorted(out) == sorted(expected)
