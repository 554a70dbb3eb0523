#!/usr/bin/env python3
"""What a schema can't check in deploy/kubernetes and deploy/kubernetes/mesh: that the
objects agree with each other, with the container image and with the server.

Usage: kubernetes_consistency.py DEPLOY_DIR   (the repository's deploy/ directory)

For the mesh it also runs deploy/container/entrypoint.sh (FERRODIR_CONFIG_ONLY=1, under
/bin/sh) with the StatefulSet's own environment for each pod name, and reads back the
config each pod would start with.

Needs PyYAML (a dependency of kubernetes-validate). Exits 1 naming every problem.
"""

import os
import re
import subprocess
import sys
import tempfile
import tomllib
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


def server_paths(root):
    """The paths the server's metrics listener answers (server/src/metrics/http.rs)."""
    source = root / "server" / "src" / "metrics" / "http.rs"
    return set(re.findall(r'b"(/[a-z]+)"\s*=>', source.read_text())) if source.exists() else set()


def check_statefulset(statefulset, entrypoint_text, replica, paths=None):
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
    for path in set(expected_probes.values()) - (paths if paths is not None else set(expected_probes.values())):
        problems.append(f"the server's metrics listener does not answer {path} (server/src/metrics/http.rs)")
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


def env_entries(statefulset):
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container.get("env", [])}


def check_mesh(objects, entrypoint):
    """deploy/kubernetes/mesh: one StatefulSet of writable nodes, its headless Service (the
    peers' names), the write Service ferrodir-write (ready pods only), one budget; and the
    config the entrypoint writes for each pod from the StatefulSet's own environment."""
    problems = []
    statefulsets = objects.get("StatefulSet", [])
    if [s["metadata"]["name"] for s in statefulsets] != ["ferrodir-mesh"]:
        return [f"expected the one StatefulSet ferrodir-mesh, found {[s['metadata']['name'] for s in statefulsets]}"]
    (mesh,) = statefulsets
    name, spec = mesh["metadata"]["name"], mesh["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    (container,) = spec["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    replicas = spec.get("replicas", 1)
    if replicas < 3:
        problems.append(f"replicas {replicas}: a mesh that survives losing a node needs 3")
    if spec.get("podManagementPolicy") != "Parallel":
        problems.append("podManagementPolicy should be Parallel: a pod is ready only once it reached its peers")
    entries = env_entries(mesh)
    env = {n: e.get("value") for n, e in entries.items()}

    # The variables of the entrypoint's mesh mode against the objects they describe.
    if env.get("FERRODIR_MULTI_PROVIDER") != "true":
        problems.append("FERRODIR_MULTI_PROVIDER should be \"true\"")
    if env.get("FERRODIR_MESH_SIZE") != str(replicas):
        problems.append(f"FERRODIR_MESH_SIZE {env.get('FERRODIR_MESH_SIZE')!r} is not replicas ({replicas})")
    if env.get("FERRODIR_MESH_SERVICE") != spec["serviceName"]:
        problems.append(f"FERRODIR_MESH_SERVICE {env.get('FERRODIR_MESH_SERVICE')!r} is not serviceName {spec['serviceName']!r}")
    if env.get("FERRODIR_MESH_NAME", name) != name:
        problems.append(f"FERRODIR_MESH_NAME {env['FERRODIR_MESH_NAME']!r} is not the StatefulSet's name {name!r}")
    scheme = env.get("FERRODIR_MESH_SCHEME", "ldap")
    mesh_port = int(env.get("FERRODIR_MESH_PORT") or {"ldap": 3389, "ldaps": 3636}.get(scheme, 0))
    if ports.get(scheme) != mesh_port:
        problems.append(f"FERRODIR_MESH_PORT {mesh_port} is not the pods' {scheme} port {ports.get(scheme)}")
    pod_name = entries.get("FERRODIR_POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    if "FERRODIR_POD_NAME" in entries and pod_name != "metadata.name":
        problems.append("FERRODIR_POD_NAME should come from the downward API's metadata.name")
    if not env.get("FERRODIR_SERVER_ID", "ordinal+1").startswith("ordinal+"):
        problems.append("FERRODIR_SERVER_ID in a mesh: leave it unset or ordinal+BASE")
    for variable in ("FERRODIR_REPLICATION_PROVIDER", "FERRODIR_REPLICATION_UPDATE_REFERRAL"):
        if variable in env:
            problems.append(f"{variable} is a read replica's; a mesh node's providers are its peers")
    if env.get("FERRODIR_REPLICATION_STARTTLS") != "true" and scheme != "ldaps":
        problems.append("the nodes should talk to one another over TLS (StartTLS or ldaps)")

    services = {s["metadata"]["name"]: s for s in objects.get("Service", [])}
    headless = services.get(spec["serviceName"])
    if headless is None:
        problems.append(f"serviceName {spec['serviceName']} is not a Service here")
    else:
        if headless["spec"].get("clusterIP") != "None":
            problems.append(f"{spec['serviceName']} is not headless (clusterIP: None)")
        if headless["spec"].get("publishNotReadyAddresses") is not True:
            problems.append(f"{spec['serviceName']} needs publishNotReadyAddresses: true, or the pods can't reach each other before they are ready")
        if not selects(headless["spec"]["selector"], pod_labels):
            problems.append(f"{spec['serviceName']} does not select the mesh's pods")
        if mesh_port not in {p["port"] for p in headless["spec"]["ports"] if p["targetPort"] == scheme}:
            problems.append(f"{spec['serviceName']} does not name port {mesh_port} ({scheme}) that the peers use")
    write = services.get("ferrodir-write")
    if write is None:
        problems.append("no write Service ferrodir-write")
    else:
        if write["spec"].get("clusterIP") == "None" or write["spec"].get("publishNotReadyAddresses"):
            problems.append("ferrodir-write must be a normal Service: only ready (caught up) pods get clients")
        if not selects(write["spec"]["selector"], pod_labels):
            problems.append("ferrodir-write does not select the mesh's pods")
    for service in services.values():
        for port in service["spec"]["ports"]:
            if port["targetPort"] not in ports:
                problems.append(f"Service {service['metadata']['name']} targets port {port['targetPort']}, which the pods lack")
    budgets = objects.get("PodDisruptionBudget", [])
    if len(budgets) != 1 or not selects(budgets[0]["spec"]["selector"]["matchLabels"], pod_labels) \
            or budgets[0]["spec"].get("maxUnavailable") != 1:
        problems.append("one PodDisruptionBudget with maxUnavailable: 1 should select the mesh's pods")

    problems += check_mesh_configs(mesh, entrypoint, env, scheme, mesh_port)
    return problems


def check_mesh_configs(mesh, entrypoint, env, scheme, port):
    """Runs the entrypoint with the StatefulSet's environment as each pod NAME-i would, and
    reads back the config: multi_provider, server_ids all different, and exactly one
    consumer of every other pod, by the stable name the headless Service gives it."""
    problems = []
    name, replicas, service = mesh["metadata"]["name"], mesh["spec"]["replicas"], mesh["spec"]["serviceName"]
    with tempfile.TemporaryDirectory() as work:
        password = Path(work) / "root-password"
        password.write_text("a password\n")
        server_ids = []
        for ordinal in range(replicas):
            pod = f"{name}-{ordinal}"
            variables = {k: v for k, v in env.items() if v is not None}
            variables.update({
                "PATH": "/usr/bin:/bin",
                "FERRODIR_POD_NAME": pod,
                "FERRODIR_ROOT_PASSWORD_FILE": str(password),
                "FERRODIR_CONFIG": f"{work}/none.toml",
                "FERRODIR_GENERATED_CONFIG": f"{work}/{pod}.toml",
                "FERRODIR_CONFIG_ONLY": "1",
            })
            result = subprocess.run(["/bin/sh", str(entrypoint)], env=variables, capture_output=True, text=True, timeout=30)
            if result.returncode != 0:
                problems.append(f"the entrypoint refuses {pod}'s environment: {result.stderr.strip()}")
                continue
            with open(f"{work}/{pod}.toml", "rb") as f:
                config = tomllib.load(f)
            server_ids.append(config.get("server_id"))
            if config.get("multi_provider") is not True:
                problems.append(f"{pod}: multi_provider is {config.get('multi_provider')!r}")
            got = sorted((r["rid"], r["provider"], r["type"]) for r in config.get("replication", []))
            want = [(peer + 1, f"{scheme}://{name}-{peer}.{service}:{port}", "refreshAndPersist")
                    for peer in range(replicas) if peer != ordinal]
            if got != want:
                problems.append(f"{pod}: consumers {got}, expected {want}")
            mounts = {m["mountPath"] for m in mesh["spec"]["template"]["spec"]["containers"][0].get("volumeMounts", [])}
            for entry in config.get("replication", []):
                for key in ("tls_ca_file", "password_file"):
                    if key in entry and str(Path(entry[key]).parent) not in mounts:
                        problems.append(f"{pod}: rid {entry['rid']}'s {key} {entry[key]} is not under a mount")
        if len(set(server_ids)) != len(server_ids) or not all(1 <= (s or 0) <= 4095 for s in server_ids):
            problems.append(f"server ids {server_ids}: each node needs its own, 1-4095")
    return problems


def main():
    deploy = Path(sys.argv[1])
    # The server's source beside this script (DEPLOY_DIR may be a copy, as in the negative
    # controls of tests/deploy/kubernetes.sh).
    paths = server_paths(Path(__file__).resolve().parents[2])
    objects, problems = load(deploy / "kubernetes")
    entrypoint = deploy / "container" / "entrypoint.sh"
    entrypoint_text = entrypoint.read_text()
    statefulsets = {s["metadata"]["name"]: s for s in objects.get("StatefulSet", [])}
    if sorted(statefulsets) != ["ferrodir", "ferrodir-replica"]:
        problems.append(f"expected the StatefulSets ferrodir and ferrodir-replica, found {sorted(statefulsets)}")
    else:
        for name, statefulset in sorted(statefulsets.items()):
            problems += [f"{name}: {p}" for p in check_statefulset(statefulset, entrypoint_text, name != "ferrodir", paths)]
        services = objects.get("Service", [])
        problems += check_services(list(statefulsets.values()), services, objects.get("PodDisruptionBudget", []))
        problems += check_replication(statefulsets["ferrodir"], statefulsets["ferrodir-replica"], services)
    mesh_objects, mesh_problems = load(deploy / "kubernetes" / "mesh")
    for statefulset in mesh_objects.get("StatefulSet", []):
        # The mesh's nodes bind to their peers as the replicas bind to the provider.
        mesh_problems += check_statefulset(statefulset, entrypoint_text, True, paths)
    mesh_problems += check_mesh(mesh_objects, entrypoint)
    problems += [f"mesh: {p}" for p in mesh_problems]
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    kinds = ", ".join(f"{len(v)} {k}" for k, v in sorted(objects.items()))
    mesh_kinds = ", ".join(f"{len(v)} {k}" for k, v in sorted(mesh_objects.items()))
    if problems:
        sys.exit(1)
    print(f"ok: the manifests agree with each other, the entrypoint and the server ({kinds};"
          f" mesh: {mesh_kinds}, the entrypoint's config for each of its pods read back)")


if __name__ == "__main__":
    main()
