#!/usr/bin/env bash
# Checks the Helm chart offline: `helm lint --strict` and `helm template` with each values file in
# deploy/share-worker/ci/, every rendered manifest validated against the Kubernetes schemas
# (kubernetes-validate, which ships them), the KEDA ScaledObject against KEDA's own CRD schema and
# the wiring no schema sees (deploy/check_custom.py), with the objects each file must render; and
# the settings the chart refuses, refused. helm is built from the Go module proxy and
# kubernetes-validate installed from PyPI, both pinned, into .cache/deploy.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
cache=$repo/.cache/deploy
helm_version=v3.22.0
validate_version=1.37.0
# The oldest Kubernetes the chart supports (Chart.yaml's kubeVersion) and a current one.
kube_versions="1.25.0 1.35.0"
keda_version=v2.21.0
chart=deploy/share-worker

mkdir -p "$cache/bin"
if [[ "$("$cache/bin/helm" version --template '{{.Version}}' 2>/dev/null)" != "$helm_version" ]]; then
  echo "deploy/check.sh: building helm $helm_version (Go module proxy)" >&2
  GOBIN=$cache/bin GOFLAGS=-mod=mod go install \
    -ldflags "-X helm.sh/helm/v3/internal/version.version=$helm_version" \
    "helm.sh/helm/v3/cmd/helm@$helm_version"
fi
helm=$cache/bin/helm
if [[ "$("$cache/venv/bin/pip" show kubernetes-validate 2>/dev/null | sed -n 's/^Version: //p')" != "$validate_version" ]]; then
  echo "deploy/check.sh: installing kubernetes-validate $validate_version (PyPI)" >&2
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install --quiet "kubernetes-validate==$validate_version" "jsonschema" "pyyaml"
fi
# KEDA's ScaledObject schema, from the KEDA module on the Go module proxy.
keda_dir=$(GOFLAGS=-mod=mod go mod download -json "github.com/kedacore/keda/v2@$keda_version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
scaledobject_crd=$keda_dir/config/crd/bases/keda.sh_scaledobjects.yaml
[[ -f $scaledobject_crd ]] || { echo "no ScaledObject CRD in $keda_dir" >&2; exit 1; }

# What each values file renders, kind=count (a file missing here fails the check).
declare -A renders=(
  [default-values]="Deployment=1 NetworkPolicy=0 Secret=0 ScaledObject=0"
  [keda-values]="Deployment=2 NetworkPolicy=2 Secret=0 ScaledObject=1 Service=2"
  [networkpolicy-values]="Deployment=1 NetworkPolicy=1"
  [scaler-secret-values]="Deployment=2 NetworkPolicy=0 Secret=1 ScaledObject=0"
  [scaler-tls-values]="Deployment=2 NetworkPolicy=2 Secret=0 ScaledObject=1 ConfigMap=0"
  [secrets-values]="Deployment=1 NetworkPolicy=0 ConfigMap=0"
)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for values in "$chart"/ci/*.yaml; do
  name=$(basename "$values" .yaml)
  [[ -n ${renders[$name]:-} ]] || { echo "deploy/check.sh: $values: say what it renders in \$renders" >&2; exit 1; }
  for version in $kube_versions; do
    "$helm" lint --strict --kube-version "$version" "$chart" -f "$values" >/dev/null
    "$helm" template test "$chart" --namespace jobs --kube-version "$version" -f "$values" >"$out/$name.yaml"
    "$cache/venv/bin/kubernetes-validate" --quiet --no-warn --strict --kubernetes-version "$version" "$out/$name.yaml"
    # shellcheck disable=SC2086 # one argument per kind=count
    "$cache/venv/bin/python" deploy/check_custom.py "$out/$name.yaml" "$scaledobject_crd" ${renders[$name]} \
      || { echo "deploy/check.sh: $name on Kubernetes $version" >&2; exit 1; }
  done
  echo "deploy/check.sh: $name: lint, template, schemas and wiring ok" >&2
done

# What the chart refuses, with its reason.
refused() {
  local says=$1
  shift
  local err
  if err=$("$helm" template test "$chart" --kube-version 1.35.0 "$@" 2>&1 >/dev/null); then
    echo "deploy/check.sh: helm template $* was accepted; expected: $says" >&2
    exit 1
  fi
  grep -q "$says" <<<"$err" || { echo "deploy/check.sh: $err (expected: $says)" >&2; exit 1; }
}
refused "keda.enabled needs a scaler" --set keda.enabled=true
refused "serviceMonitor.enabled needs service.enabled" --set serviceMonitor.enabled=true --set service.enabled=false
refused "config: the worker's TOML" --set config=
refused "scaler.enabled needs scaler.tls.existingSecret (TLS), or scaler.allowPlaintext: true" --set scaler.enabled=true
scaler=(--set scaler.enabled=true --set scaler.allowPlaintext=true)
refused "scaler.healthPort must differ from scaler.port" "${scaler[@]}" --set scaler.healthPort=9090
refused "scaler.tls.clientCa needs scaler.tls.existingSecret" "${scaler[@]}" --set scaler.tls.clientCa=true
refused "scaler.tls.clientCa needs keda.authenticationRef" "${scaler[@]}" --set keda.enabled=true \
  --set scaler.tls.existingSecret=scaler-tls --set scaler.tls.clientCa=true
refused "scaler.kafkaCredentials.enabled needs scaler.kafkaCredentials.existingSecret, or both username and password" \
  "${scaler[@]}" --set scaler.kafkaCredentials.enabled=true --set scaler.kafkaCredentials.username=scaler
refused "networkPolicy.enabled: auto, true or false" --set networkPolicy.enabled=yes
refused "networkPolicy.scalerFrom: at least one peer" "${scaler[@]}" --set-json 'networkPolicy.scalerFrom=[]'
refused "networkPolicy.metricsFrom: at least one peer" --set networkPolicy.enabled=true --set-json 'networkPolicy.metricsFrom=[]'
echo "deploy/check.sh: the chart refuses what it must" >&2
