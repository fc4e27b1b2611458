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


def test_settings_from_a_file_the_environment_and_flags(tmp_path):
    """flag > WEIR_* variable > --config file > default; unknown keys are
    refused by name; the node serves with what the file says, logging JSON
    lines when it asks for them."""
    import json
    import signal
    import time
    from confluent_kafka.admin import AdminClient
    kafka, http = free_port(), free_port()
    conf = tmp_path / "weir.toml"
    conf.write_text(f'data_dir = "{tmp_path / "data"}"\nkafka = "127.0.0.1:{kafka}"\naddr = "127.0.0.1:{http}"\n'
                    'max-connections = 123\ncores = 1\nlog_format = "json"\ndefault_partitions = 3\n')
    r = run(["--config", str(conf), "--print-config", "--default-partitions", "5"],
            prefix="WEIR_CORES=2 WEIR_MAX_CONNECTIONS=77 ")
    assert r.returncode == 0, r.stderr
    shown = dict(line.split("  # ") for line in r.stdout.splitlines() if not line.startswith("#"))
    assert shown["max_connections = 77"] == "environment"
    assert shown["cores = 2"] == "environment"
    assert shown["default_partitions = 5"] == "flag"
    assert shown[f'kafka = "127.0.0.1:{kafka}"'] == "file"
    assert shown["max_request_bytes = 104857600"] == "default"
    # An unknown key is refused, saying which.
    bad = tmp_path / "bad.toml"
    bad.write_text("max_conections = 5\n")
    r = run(["--config", str(bad)])
    assert r.returncode == 2 and 'unknown key "max_conections"' in r.stderr, r.stderr
    # A node from the file alone: it answers where the file says, logs JSON.
    proc = subprocess.Popen([WEIR, "serve", "--config", str(conf)], stderr=subprocess.PIPE, text=True)
    try:
        serving = None
        deadline = time.time() + 30
        while serving is None and time.time() < deadline:
            line = proc.stderr.readline()
            assert line, "the node exited"
            entry = json.loads(line)
            assert set(entry) == {"ts", "level", "target", "msg"}, entry
            if "weir serving" in entry["msg"]:
                serving = entry
        assert serving is not None and f"127.0.0.1:{kafka}" in serving["msg"] and "1 shard(s)" in serving["msg"]
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka}"}).list_topics(timeout=10)
        assert len(md.brokers) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
