"""Start-up problems are one clear line on stderr and a non-zero exit."""
import subprocess

from conftest import WEIR, free_port


def run(args, prefix=""):
    cmd = f"{prefix}exec {WEIR} serve " + " ".join(args)
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=30)


def test_port_taken_by_another_node(node, tmp_path):
    r = run([str(tmp_path / "other"), "--kafka", node.bootstrap, "--addr", f"127.0.0.1:{free_port()}"])
    assert r.returncode != 0
    assert "cannot listen for Kafka" in r.stderr and "another process" in r.stderr, r.stderr


def test_data_directory_not_usable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = run([str(blocker / "data"), "--kafka", f"127.0.0.1:{free_port()}", "--addr", f"127.0.0.1:{free_port()}"])
    assert r.returncode != 0
    assert "data directory" in r.stderr, r.stderr


def test_memlock_too_low(tmp_path):
    r = run([str(tmp_path / "d"), "--kafka", f"127.0.0.1:{free_port()}", "--addr", f"127.0.0.1:{free_port()}"],
            prefix="ulimit -l 64; ")
    assert r.returncode != 0
    assert "ulimit -l" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_data_directory_of_a_running_node(node):
    # A second node on the same data directory (on ports of its own) would
    # overwrite the first one's segments: it must refuse to start, and the
    # first keeps serving.
    r = run([str(node.data_dir), "--kafka", f"127.0.0.1:{free_port()}", "--addr", f"127.0.0.1:{free_port()}"])
    assert r.returncode != 0
    assert "in use by another process" in r.stderr and ".lock" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert node.stats(), "the first node stopped answering"
    # The lock goes with the process: after the first node stops, a new one
    # on the same directory starts.
    node.stop()
    node.start()
    assert node.stats()
