#!/usr/bin/env bash
# Validates deploy/kubernetes (one provider and read replicas) and deploy/kubernetes/mesh
# (a multi-provider mesh) offline:
# 1. every manifest of both kustomizations against the Kubernetes OpenAPI schemas that
#    kubernetes-validate bundles (strict: unknown fields are errors), for Kubernetes 1.30
#    and for the newest version it bundles, with no network (in a network namespace of its
#    own where unshare works); where `kubectl kustomize` works, what each kustomization
#    renders (its labels and image applied) is validated the same way;
# 2. a negative control: a manifest with a misspelt field must fail, so a validator that
#    passes everything is caught;
# 3. tests/deploy/kubernetes_consistency.py: the objects agree with each other, with the
#    entrypoint's variables (for the mesh: the config the entrypoint writes from the
#    StatefulSet's own environment, pod by pod) and with the server's ports and health
#    paths.
# Needs: pip install kubernetes-validate (it brings PyYAML and jsonschema).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tests/deploy/lib.sh
source "$here/lib.sh"
manifests=$root/deploy/kubernetes

if ! command -v kubernetes-validate >/dev/null; then
    echo "kubernetes-validate is not installed: pip install kubernetes-validate" >&2
    exit 1
fi

offline=()
if unshare -n true 2>/dev/null; then
    offline=(unshare -n)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

newest=$(kubernetes-validate --version)
# kubectl's built-in kustomize, when it runs here (it needs no cluster); CI may lack it.
render=
if command -v kubectl >/dev/null && kubectl kustomize "$manifests" >/dev/null 2>&1; then
    render=1
fi
for directory in "$manifests" "$manifests/mesh"; do
    where=${directory#"$root/"}
    files=()
    for file in "$directory"/*.yaml; do
        [ "$(basename "$file")" = kustomization.yaml ] || files+=("$(basename "$file")")
    done
    for version in 1.30.0 "$newest"; do
        if output=$(cd "$directory" && "${offline[@]}" kubernetes-validate --strict -k "$version" "${files[@]}" 2>&1); then
            pass "$where: ${#files[@]} manifests valid for Kubernetes $version (strict${offline:+, no network})"
        else
            fail "$where: kubernetes-validate for $version: $output"
        fi
    done
    if [ -n "$render" ]; then
        rendered=$work/$(basename "$directory")-rendered.yaml
        if ! kubectl kustomize "$directory" >"$rendered" 2>"$work/err"; then
            fail "$where: kubectl kustomize: $(cat "$work/err")"
        elif output=$("${offline[@]}" kubernetes-validate --strict -k 1.30.0 "$rendered" 2>&1); then
            pass "$where: what kubectl kustomize renders ($(grep -c '^kind:' "$rendered") objects) is valid for Kubernetes 1.30.0"
        else
            fail "$where: the rendered kustomization: $output"
        fi
    fi
done
sed 's/^  serviceName:/  servicename:/' "$manifests/statefulset.yaml" >"$work/broken.yaml"
if "${offline[@]}" kubernetes-validate --strict -k 1.30.0 "$work/broken.yaml" >"$work/out" 2>&1; then
    fail "negative control: a StatefulSet with 'servicename' passed validation"
else
    pass "negative control: a misspelt field is refused ($(grep -o "'serviceName' is a required property" "$work/out" || head -c 80 "$work/out"))"
fi

if output=$(python3 "$here/kubernetes_consistency.py" "$root/deploy" 2>&1); then
    pass "${output#ok: }"
else
    fail "consistency: $output"
fi

# Negative controls for the mesh's consistency checks: each of these mistakes, made in a
# copy of deploy/, must be named.
mesh_mistake() {
    local what=$1 file=$2 script=$3 expected=$4
    rm -rf "$work/deploy"
    cp -r "$root/deploy" "$work/deploy"
    sed -i "$script" "$work/deploy/kubernetes/mesh/$file"
    if cmp -s "$root/deploy/kubernetes/mesh/$file" "$work/deploy/kubernetes/mesh/$file"; then
        fail "negative control '$what': the edit changed nothing in $file"
    elif python3 "$here/kubernetes_consistency.py" "$work/deploy" >"$work/out" 2>&1; then
        fail "negative control: $what passed the consistency checks"
    elif ! grep -qF -- "$expected" "$work/out"; then
        fail "negative control '$what': expected '$expected', got: $(cat "$work/out")"
    else
        caught=$((caught + 1))
    fi
}
caught=0
mesh_mistake "a mesh size other than replicas" statefulset.yaml \
    '/name: FERRODIR_MESH_SIZE/{n;s/"3"/"2"/}' 'FERRODIR_MESH_SIZE '"'"'2'"'"' is not replicas (3)'
mesh_mistake "FERRODIR_MESH_SERVICE other than serviceName" statefulset.yaml \
    '/name: FERRODIR_MESH_SERVICE/{n;s/value: .*/value: ferrodir-peers/}' "is not serviceName"
mesh_mistake "a mesh port the pods don't serve LDAP on" statefulset.yaml \
    '/name: FERRODIR_MESH_PORT/{n;s/"3389"/"389"/}' "FERRODIR_MESH_PORT 389 is not the pods' ldap port"
mesh_mistake "peers' names published only when ready" service-headless.yaml \
    's/publishNotReadyAddresses: true/publishNotReadyAddresses: false/' "needs publishNotReadyAddresses: true"
mesh_mistake "a write Service that misses the mesh" service-write.yaml \
    's/app.kubernetes.io\/instance: ferrodir-mesh/app.kubernetes.io\/instance: ferrodir/' "ferrodir-write does not select"
mesh_mistake "readiness on a path the server does not answer" statefulset.yaml \
    's|path: /readyz|path: /ready|' "readinessProbe should be httpGet /readyz"
mesh_mistake "pods started one by one" statefulset.yaml \
    's/podManagementPolicy: Parallel/podManagementPolicy: OrderedReady/' "podManagementPolicy should be Parallel"
mesh_mistake "one fixed server id for every node" statefulset.yaml \
    's/^\(\s*\)- name: FERRODIR_MESH_SIZE/\1- name: FERRODIR_SERVER_ID\n\1  value: "7"\n&/' "FERRODIR_SERVER_ID in a mesh"
if [ "$caught" -eq 8 ]; then
    pass "negative control: 8 mistakes in the mesh's manifests are each named by the consistency checks"
fi

finish kubernetes
