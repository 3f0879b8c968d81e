#!/usr/bin/env bash
# Validates deploy/kubernetes offline: every manifest, strictly (an unknown
# field is an error, not ignored), against the schemas of one pinned
# Kubernetes version that kubernetes-validate ships (no network, no cluster).
# A resource whose kind has no schema (a misspelt kind or apiVersion) fails
# too: kubernetes-validate only warns about those. Also checks that
# kustomization.yaml lists every manifest but the examples (*-example.yaml:
# placeholder Secrets, an Ingress for one controller), which are validated
# but never applied by `kubectl apply -k`, and, when kubectl is installed,
# validates the kustomize output as well.
set -euo pipefail
cd "$(dirname "$0")/.."

# The oldest Kubernetes minor the manifests are meant for.
K8S_VERSION=1.31.0
DIR=deploy/kubernetes

python3 - "$DIR" <<'PY'
import pathlib, sys, yaml
d = pathlib.Path(sys.argv[1])
listed = yaml.safe_load((d / "kustomization.yaml").read_text())["resources"]
examples = {p.name for p in d.glob("*-example.yaml")}
present = {p.name for p in d.glob("*.yaml")} - {"kustomization.yaml"} - examples
missing = [r for r in listed if not (d / r).is_file()]
unlisted = sorted(present - set(listed))
applied_examples = sorted(examples & set(listed))
if missing or unlisted or applied_examples:
    sys.exit(
        f"kustomization.yaml: missing files {missing}, manifests not listed {unlisted}, "
        f"examples listed (they must not be) {applied_examples}"
    )
PY

validate() {
  local out
  out=$(python3 -m kubernetes_validate --strict --quiet -k "$K8S_VERSION" "$@" 2>&1) || {
    printf '%s\n' "$out" >&2
    return 1
  }
  if [ -n "$out" ]; then # warnings, e.g. no schema for a kind
    printf '%s\n' "$out" >&2
    return 1
  fi
}

manifests=()
for f in "$DIR"/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] || manifests+=("$f")
done
validate "${manifests[@]}"
if command -v kubectl >/dev/null; then
  kubectl kustomize "$DIR" >"${TMPDIR:-/tmp}/stasis-kustomize.$$.yaml"
  validate "${TMPDIR:-/tmp}/stasis-kustomize.$$.yaml"
  rm -f "${TMPDIR:-/tmp}/stasis-kustomize.$$.yaml"
fi
echo "deploy/kubernetes: ${#manifests[@]} files valid against Kubernetes $K8S_VERSION (strict, offline)"
