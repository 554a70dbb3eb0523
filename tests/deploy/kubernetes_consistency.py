#!/usr/bin/env python3
"""What a schema can't check in deploy/kubernetes: that the objects agree with each other,
with the container image and with the server.

Usage: kubernetes_consistency.py DEPLOY_DIR   (the repository's deploy/ directory)

Needs PyYAML (a dependency of kubernetes-validate). Exits 1 naming every problem.
"""

import re
import sys
from pathlib import Path

import yaml


def load(directory):
    """Every object in the kustomization's resources, by kind; problems with the list."""
    problems = []
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    listed = kustomization.get("resources", [])
    present = sorted(p.name for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")
    for name in sorted(set(present) - set(listed)):
        problems.append(f"{name} is not listed in kustomization.yaml's resources")
    objects = {}
    for name in listed:
        path = directory / name
        if not path.exists():
            problems.append(f"kustomization.yaml lists {name}, which does not exist")
            continue
        for document in yaml.safe_load_all(path.read_text()):
            objects.setdefault(document["kind"], []).append(document)
    return objects, problems


def check_statefulset(statefulset, services, budgets, entrypoint_text):
    problems = []
    spec = statefulset["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    annotations = spec["template"]["metadata"].get("annotations", {})
    if spec.get("replicas") != 1:
        problems.append("the StatefulSet must have replicas: 1 until replication lands")
    if spec["selector"]["matchLabels"].items() - labels.items():
        problems.append("the StatefulSet's selector does not match its pod labels")
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    if ports != {"ldap": 3389, "ldaps": 3636, "metrics": 9390}:
        problems.append(f"container ports {ports} are not the image's 3389/3636/9390")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}

    # Services: selectors match the pod, target ports exist, the headless one governs.
    names = {s["metadata"]["name"]: s for s in services}
    governing = names.get(spec["serviceName"])
    if governing is None or governing["spec"].get("clusterIP") != "None":
        problems.append(f"serviceName {spec['serviceName']} is not a headless Service here")
    for service in services:
        name = service["metadata"]["name"]
        if service["spec"]["selector"].items() - labels.items():
            problems.append(f"Service {name}'s selector does not select the pod")
        for port in service["spec"]["ports"]:
            if port["targetPort"] not in ports:
                problems.append(f"Service {name} targets port {port['targetPort']}, which the pod lacks")
    for budget in budgets:
        if budget["spec"]["selector"]["matchLabels"].items() - labels.items():
            problems.append("the PodDisruptionBudget does not select the pod")
        if budget["spec"].get("maxUnavailable") != 1:
            problems.append("the PodDisruptionBudget should have maxUnavailable: 1")

    # Probes on the metrics port, on the server's health paths.
    expected_probes = {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in expected_probes.items():
        http = container.get(probe, {}).get("httpGet", {})
        if (http.get("path"), http.get("port")) != (path, "metrics"):
            problems.append(f"{probe} should be httpGet {path} on the metrics port, is {http}")
    metrics_listen = env.get("FERRODIR_METRICS_LISTEN", "0.0.0.0:9390")
    if not metrics_listen.startswith("0.0.0.0:") or int(metrics_listen.rsplit(":", 1)[1]) != ports["metrics"]:
        problems.append(f"FERRODIR_METRICS_LISTEN={metrics_listen} is not 0.0.0.0 on the metrics port")
    if annotations.get("prometheus.io/scrape") != "true" or annotations.get("prometheus.io/port") != str(ports["metrics"]):
        problems.append("the prometheus.io annotations do not name the metrics port")

    # Every FERRODIR_* variable is one the entrypoint reads; files lie under mounts.
    known = set(re.findall(r"\bFERRODIR_[A-Z_]+\b", entrypoint_text))
    for name in env:
        if name not in known:
            problems.append(f"env {name} is not read by deploy/container/entrypoint.sh")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    claims = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
    mounts = {}
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes and mount["name"] not in claims:
            problems.append(f"volumeMount {mount['name']} has no volume or claim template")
        mounts[mount["mountPath"]] = mount["name"]
    for name in ("FERRODIR_ROOT_PASSWORD_FILE", "FERRODIR_TLS_CERT_FILE", "FERRODIR_TLS_KEY_FILE"):
        path = env.get(name)
        if path is None:
            problems.append(f"{name} is not set")
            continue
        mount = mounts.get(str(Path(path).parent))
        if mount is None or "secret" not in volumes.get(mount, {}):
            problems.append(f"{name}={path} is not in a directory mounted from a Secret")
    if "FERRODIR_ROOT_PASSWORD" in env:
        problems.append("FERRODIR_ROOT_PASSWORD in the manifest: use the Secret file")
    if mounts.get("/data") not in claims:
        problems.append("/data is not mounted from a volumeClaimTemplate")
    if "emptyDir" not in volumes.get(mounts.get("/run/ferrodir", ""), {}):
        problems.append("/run/ferrodir (the generated config) is not an emptyDir")

    # Security context: what the brief and a restricted Pod Security Standard ask.
    pod_security = pod.get("securityContext", {})
    security = container.get("securityContext", {})
    wanted = [
        (pod_security.get("runAsNonRoot") or security.get("runAsNonRoot"), True, "runAsNonRoot"),
        (pod_security.get("runAsUser", security.get("runAsUser")), 10001, "runAsUser 10001"),
        (security.get("readOnlyRootFilesystem"), True, "readOnlyRootFilesystem"),
        (security.get("allowPrivilegeEscalation"), False, "allowPrivilegeEscalation: false"),
        (security.get("capabilities", {}).get("drop"), ["ALL"], "capabilities drop ALL"),
        (
            (security.get("seccompProfile") or pod_security.get("seccompProfile") or {}).get("type"),
            "RuntimeDefault",
            "seccompProfile RuntimeDefault",
        ),
    ]
    for actual, expected, what in wanted:
        if actual != expected:
            problems.append(f"securityContext: expected {what}, found {actual!r}")
    resources = container.get("resources", {})
    for kind in ("requests", "limits"):
        if not {"cpu", "memory"} <= set(resources.get(kind, {})):
            problems.append(f"resources.{kind} should set cpu and memory")
    return problems


def main():
    deploy = Path(sys.argv[1])
    objects, problems = load(deploy / "kubernetes")
    entrypoint_text = (deploy / "container" / "entrypoint.sh").read_text()
    statefulsets = objects.get("StatefulSet", [])
    if len(statefulsets) != 1:
        problems.append(f"expected one StatefulSet, found {len(statefulsets)}")
    else:
        problems += check_statefulset(
            statefulsets[0],
            objects.get("Service", []),
            objects.get("PodDisruptionBudget", []),
            entrypoint_text,
        )
    if not objects.get("PodDisruptionBudget"):
        problems.append("no PodDisruptionBudget")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    kinds = ", ".join(f"{len(v)} {k}" for k, v in sorted(objects.items()))
    if problems:
        sys.exit(1)
    print(f"ok: the manifests agree with each other, the entrypoint and the server ({kinds})")


if __name__ == "__main__":
    main()
