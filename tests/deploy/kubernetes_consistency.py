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


def selects(selector, labels):
    return not (selector.items() - labels.items())


def check_services(statefulsets, services, budgets):
    """Services and budgets against both StatefulSets: the write Service reaches the
    provider only, the read Service every pod, each headless Service governs its set."""
    problems = []
    pods = {s["metadata"]["name"]: s["spec"]["template"]["metadata"]["labels"] for s in statefulsets}
    ports = {
        s["metadata"]["name"]: {p["name"] for p in s["spec"]["template"]["spec"]["containers"][0]["ports"]}
        for s in statefulsets
    }
    names = {s["metadata"]["name"]: s for s in services}
    for statefulset in statefulsets:
        name = statefulset["metadata"]["name"]
        governing = names.get(statefulset["spec"]["serviceName"])
        if governing is None or governing["spec"].get("clusterIP") != "None":
            problems.append(f"{name}'s serviceName {statefulset['spec']['serviceName']} is not a headless Service here")
        elif [n for n, labels in pods.items() if selects(governing["spec"]["selector"], labels)] != [name]:
            problems.append(f"headless Service {governing['metadata']['name']} does not select exactly {name}'s pods")
        if not any(selects(b["spec"]["selector"]["matchLabels"], pods[name]) for b in budgets):
            problems.append(f"no PodDisruptionBudget selects {name}'s pods")
    for service in services:
        name = service["metadata"]["name"]
        selected = [n for n, labels in pods.items() if selects(service["spec"]["selector"], labels)]
        if not selected:
            problems.append(f"Service {name}'s selector selects no pod")
        for port in service["spec"]["ports"]:
            for statefulset in selected:
                if port["targetPort"] not in ports[statefulset]:
                    problems.append(f"Service {name} targets port {port['targetPort']}, which {statefulset}'s pods lack")
    if sorted(n for n, labels in pods.items() if "ferrodir" in names and selects(names["ferrodir"]["spec"]["selector"], labels)) != ["ferrodir"]:
        problems.append("the write Service ferrodir must select the provider's pods only")
    if "ferrodir-read" not in names or sorted(
        n for n, labels in pods.items() if selects(names["ferrodir-read"]["spec"]["selector"], labels)
    ) != sorted(pods):
        problems.append("the read Service ferrodir-read must select every pod, provider and replicas")
    for budget in budgets:
        if budget["spec"].get("maxUnavailable") != 1:
            problems.append(f"PodDisruptionBudget {budget['metadata']['name']} should have maxUnavailable: 1")
    return problems


def check_replication(provider, replica, services):
    """The replica's [[replication]] settings point at the provider's pod 0 on its LDAP
    port, through the provider's headless Service, with StartTLS verified against a CA in
    a Secret, and refer writes to the write Service."""
    problems = []

    def env_of(statefulset):
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value") for e in container.get("env", [])}

    provider_env, replica_env = env_of(provider), env_of(replica)
    if any(name.startswith("FERRODIR_REPLICATION_") for name in provider_env):
        problems.append("the provider StatefulSet must not replicate from anyone")
    if provider["spec"].get("replicas") != 1:
        problems.append("the provider StatefulSet must have replicas: 1 (one writable copy)")
    if (replica["spec"].get("replicas") or 0) < 1:
        problems.append("the replica StatefulSet should have at least one replica")
    (container,) = provider["spec"]["template"]["spec"]["containers"]
    ldap_port = {p["name"]: p["containerPort"] for p in container["ports"]}["ldap"]
    expected = f"ldap://{provider['metadata']['name']}-0.{provider['spec']['serviceName']}:{ldap_port}"
    if replica_env.get("FERRODIR_REPLICATION_PROVIDER") != expected:
        problems.append(f"FERRODIR_REPLICATION_PROVIDER should be {expected}, is {replica_env.get('FERRODIR_REPLICATION_PROVIDER')}")
    if replica_env.get("FERRODIR_REPLICATION_STARTTLS") != "true" or not replica_env.get("FERRODIR_REPLICATION_TLS_CA_FILE"):
        problems.append("the replicas should use StartTLS with FERRODIR_REPLICATION_TLS_CA_FILE")
    referral = replica_env.get("FERRODIR_REPLICATION_UPDATE_REFERRAL", "")
    match = re.fullmatch(r"ldaps?://([a-z0-9-]+)(\.[a-z0-9.-]+)?:(\d+)", referral)
    write = {s["metadata"]["name"]: s for s in services}.get("ferrodir")
    if not match or write is None or match.group(1) != "ferrodir" or int(match.group(3)) not in {p["port"] for p in write["spec"]["ports"]}:
        problems.append(f"FERRODIR_REPLICATION_UPDATE_REFERRAL {referral!r} should name the write Service ferrodir and one of its ports")
    ids = [provider_env.get("FERRODIR_SERVER_ID"), replica_env.get("FERRODIR_SERVER_ID")]
    if not (ids[0] or "").isdigit() or not (ids[1] or "").startswith("ordinal+"):
        problems.append(f"server ids {ids}: the provider a number, the replicas ordinal+BASE")
    elif int(ids[0]) >= int(ids[1].split("+")[1]):
        problems.append(f"server ids {ids}: the replicas' BASE must be above the provider's")
    return problems


def check_statefulset(statefulset, entrypoint_text, replica):
    problems = []
    spec = statefulset["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    annotations = spec["template"]["metadata"].get("annotations", {})
    if spec["selector"]["matchLabels"].items() - labels.items():
        problems.append("the StatefulSet's selector does not match its pod labels")
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    if ports != {"ldap": 3389, "ldaps": 3636, "metrics": 9390}:
        problems.append(f"container ports {ports} are not the image's 3389/3636/9390")
    env = {e["name"]: e.get("value") for e in container.get("env", [])}

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
    files = ["FERRODIR_ROOT_PASSWORD_FILE", "FERRODIR_TLS_CERT_FILE", "FERRODIR_TLS_KEY_FILE"]
    if replica:
        files += ["FERRODIR_REPLICATION_PASSWORD_FILE", "FERRODIR_REPLICATION_TLS_CA_FILE"]
    for name in files:
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
    statefulsets = {s["metadata"]["name"]: s for s in objects.get("StatefulSet", [])}
    if sorted(statefulsets) != ["ferrodir", "ferrodir-replica"]:
        problems.append(f"expected the StatefulSets ferrodir and ferrodir-replica, found {sorted(statefulsets)}")
    else:
        for name, statefulset in sorted(statefulsets.items()):
            problems += [f"{name}: {p}" for p in check_statefulset(statefulset, entrypoint_text, name != "ferrodir")]
        services = objects.get("Service", [])
        problems += check_services(list(statefulsets.values()), services, objects.get("PodDisruptionBudget", []))
        problems += check_replication(statefulsets["ferrodir"], statefulsets["ferrodir-replica"], services)
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    kinds = ", ".join(f"{len(v)} {k}" for k, v in sorted(objects.items()))
    if problems:
        sys.exit(1)
    print(f"ok: the manifests agree with each other, the entrypoint and the server ({kinds})")


if __name__ == "__main__":
    main()
