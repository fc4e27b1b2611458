"""deploy/ as far as this machine can check it: it has a Docker client but
no daemon and no registry for base images, nor a Kubernetes cluster, so
the image is not built here. What is checked: the settings the Dockerfile,
the compose file and the StatefulSet give the node are ones it accepts,
the image's health check answers against a real node (and fails against
nothing), the StatefulSet's probes ask a path the node serves, and every
file the compose file mounts exists."""
import json
import os
import re
import subprocess
import urllib.request

import yaml

from conftest import ROOT, WEIR

DEPLOY = os.path.join(ROOT, "deploy")


def read(name):
    with open(os.path.join(DEPLOY, name)) as f:
        return f.read()


def dockerfile_env():
    """The ENV of the Dockerfile's last stage, as a dict."""
    text = read("Dockerfile").replace("\\\n", " ")
    env = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(dict(kv.split("=", 1) for kv in line[4:].split()))
    return env


def accepted(env, tmp_path):
    """`weir serve --print-config` with `env`: exits 0 and shows each
    WEIR_ value as the setting's."""
    env = {k: v.replace("/var/lib/weir", str(tmp_path / "data")) for k, v in env.items()}
    out = subprocess.run([WEIR, "serve", "--print-config"], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    for k, v in env.items():
        if k.startswith("WEIR_"):
            key = k[len("WEIR_"):].lower()
            assert re.search(rf"^{key} = \"?{re.escape(v)}\"?", out.stdout, re.M), (k, out.stdout)


def test_the_images_settings_are_accepted(tmp_path):
    env = dockerfile_env()
    assert env["WEIR_DATA_DIR"] == "/var/lib/weir"
    accepted(env, tmp_path)


def test_the_compose_and_kubernetes_settings_are_accepted(tmp_path):
    compose = yaml.safe_load(read("compose.yaml"))
    nodes = {name: s for name, s in compose["services"].items() if name.startswith("weir")}
    # Three voters, each listed at its service's name, each its own id.
    assert sorted(nodes) == ["weir1", "weir2", "weir3"]
    for i, (name, weir) in enumerate(sorted(nodes.items())):
        env = weir["environment"]
        assert env["WEIR_NODE_ID"] == str(i + 1)
        assert env["WEIR_VOTERS"] == "1@weir1:9093,2@weir2:9093,3@weir3:9093"
        accepted({**dockerfile_env(), **env}, tmp_path / name)
        assert weir["ulimits"]["memlock"] == -1
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert os.path.exists(os.path.join(DEPLOY, source)), source
    docs = list(yaml.safe_load_all(read("kubernetes.yaml")))
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert sts["spec"]["replicas"] == 3
    assert env["WEIR_VOTERS"] == "1@weir-0.weir:9093,2@weir-1.weir:9093,3@weir-2.weir:9093"
    # The command gives pod weir-N node id N+1 (run with `echo` for weir).
    for ordinal in range(3):
        script = container["command"][2].replace("exec weir", "exec echo")
        out = subprocess.run(["sh", "-c", script], env={"HOSTNAME": f"weir-{ordinal}"},
                             capture_output=True, text=True, timeout=10)
        assert out.stdout.split() == ["serve", "--node-id", str(ordinal + 1), "--kafka-advertise",
                                      f"weir-{ordinal}.weir:9092"], out
    accepted(env, tmp_path)
    # Ready once back in sync; one node may be disrupted at a time.
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    mount = container["volumeMounts"][0]
    assert mount["mountPath"] == "/var/lib/weir"
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == mount["name"]


def test_the_images_health_check_asks_the_node(node):
    line = next(l for l in read("Dockerfile").splitlines() if l.startswith("HEALTHCHECK"))
    command = json.loads(line[line.index("CMD") + 3:])
    port = node.http.rsplit(":", 1)[1]
    check = [c.replace("8080", port) for c in command]
    assert subprocess.run(check, timeout=10).returncode == 0
    with urllib.request.urlopen(node.http + "/health", timeout=10) as r:
        assert json.loads(r.read())["status"] == "ok"
    closed = [c.replace("8080", "1") for c in command]
    assert subprocess.run(closed, timeout=10, capture_output=True).returncode != 0
