#!/usr/bin/env bash
# Validates deploy/kubernetes offline:
# 1. every manifest against the Kubernetes OpenAPI schemas that kubernetes-validate bundles
#    (strict: unknown fields are errors), for Kubernetes 1.30 and for the newest version it
#    bundles, with no network (in a network namespace of its own where unshare works);
# 2. a negative control: a manifest with a misspelt field must fail, so a validator that
#    passes everything is caught;
# 3. tests/deploy/kubernetes_consistency.py: the objects agree with each other, with the
#    entrypoint's variables and with the server's ports and health paths.
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

files=()
for file in "$manifests"/*.yaml; do
    [ "$(basename "$file")" = kustomization.yaml ] || files+=("$(basename "$file")")
done
newest=$(kubernetes-validate --version)
for version in 1.30.0 "$newest"; do
    if output=$(cd "$manifests" && "${offline[@]}" kubernetes-validate --strict -k "$version" "${files[@]}" 2>&1); then
        pass "${#files[@]} manifests valid for Kubernetes $version (strict${offline:+, no network})"
    else
        fail "kubernetes-validate for $version: $output"
    fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
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

finish kubernetes
