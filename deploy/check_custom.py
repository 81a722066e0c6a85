"""Checks a rendered chart beyond the Kubernetes schemas: each ScaledObject against KEDA's CRD
schema (its openAPIV3Schema), the ServiceMonitor's fields the chart relies on, and the wiring the
schemas cannot see — no pod with a service-account token, the scaler's probes on its health
listener, every file an argument names inside a volume that holds it, NetworkPolicies that name
their peers and select the chart's pods on ports those pods open — and, when given, how many
objects of each kind there are.

    check_custom.py RENDERED.yaml KEDA_SCALEDOBJECT_CRD.yaml [KIND=COUNT ...]
"""

import collections
import posixpath
import sys

import jsonschema
import yaml

# Flags of `share-worker` whose value is a file in the pod.
FILE_FLAGS = ("--config", "--tls-cert", "--tls-key", "--client-ca")


class Failed(Exception):
    pass


def check_scaled_object(doc, schemas):
    api = doc.get("apiVersion", "")
    version = api.split("/")[-1]
    if version not in schemas:
        raise Failed(f"ScaledObject {api}: KEDA has no such version")
    jsonschema.validate(doc, schemas[version])
    trigger = doc["spec"]["triggers"][0]
    for key in ("scalerAddress", "group", "topics", "lagThreshold"):
        if not trigger["metadata"].get(key):
            raise Failed(f"ScaledObject trigger without {key}")
    host = trigger["metadata"]["scalerAddress"].rsplit(":", 1)[0]
    if "." not in host:
        raise Failed(
            f"ScaledObject scalerAddress {host!r}: KEDA's operator resolves a bare name in its own namespace"
        )


def check_service_monitor(doc):
    endpoint = doc["spec"]["endpoints"][0]
    if endpoint.get("path") != "/metrics" or not doc["spec"]["selector"]["matchLabels"]:
        raise Failed("ServiceMonitor without /metrics or a selector")


def args_of(container):
    """The container's `--flag value` pairs."""
    args = container.get("args", [])
    return {a: b for a, b in zip(args, args[1:]) if a.startswith("--")}


def check_file_in_volume(name, path, container, volumes):
    """`path` lies in a volume mounted in `container` that holds it."""
    for mount in container.get("volumeMounts", []):
        if posixpath.dirname(path) != mount["mountPath"].rstrip("/"):
            continue
        volume = volumes[mount["name"]]
        source = volume.get("secret") or volume.get("configMap")
        if source is None:
            raise Failed(f"{name}: {path} is in volume {mount['name']}, neither a Secret nor a ConfigMap")
        items = source.get("items")
        if items is not None and posixpath.basename(path) not in {i["path"] for i in items}:
            raise Failed(f"{name}: volume {mount['name']} does not hold {posixpath.basename(path)}")
        return
    raise Failed(f"{name}: no volume is mounted where {path} is")


def check_deployment(doc):
    name = doc["metadata"]["name"]
    pod = doc["spec"]["template"]["spec"]
    if pod.get("automountServiceAccountToken") is not False:
        raise Failed(f"Deployment {name}: automountServiceAccountToken is not false")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        args = args_of(container)
        for flag in FILE_FLAGS:
            if flag in args:
                check_file_in_volume(name, args[flag], container, volumes)
        for env in container.get("env", []):
            if env["name"].endswith("_FILE") and "value" in env:
                check_file_in_volume(name, env["value"], container, volumes)
        if container["name"] != "scaler":
            continue
        health = args.get("--health-listen")
        if health is None:
            raise Failed(f"Deployment {name}: the scaler without --health-listen")
        port = int(health.rsplit(":", 1)[1])
        if port == int(args["--listen"].rsplit(":", 1)[1]):
            raise Failed(f"Deployment {name}: the health listener on the gRPC port")
        if "--tls-cert" not in args and "--allow-plaintext" not in container["args"]:
            raise Failed(f"Deployment {name}: the scaler off loopback without TLS needs --allow-plaintext")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            grpc = container.get(probe, {}).get("grpc")
            if grpc is None or grpc["port"] != port:
                raise Failed(f"Deployment {name}: {probe} is not a gRPC probe of port {port}")
        if container["readinessProbe"]["grpc"].get("service") != "externalscaler.ExternalScaler":
            raise Failed(f"Deployment {name}: readiness does not ask for externalscaler.ExternalScaler")


def check_network_policy(doc, deployments):
    name = doc["metadata"]["name"]
    selector = doc["spec"]["podSelector"].get("matchLabels") or {}
    selected = [
        d
        for d in deployments
        if selector and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    ]
    if not selected:
        raise Failed(f"NetworkPolicy {name}: selects none of the chart's pods")
    opened = {
        p["containerPort"]
        for d in selected
        for c in d["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports", [])
    }
    if doc["spec"].get("policyTypes") != ["Ingress"]:
        raise Failed(f"NetworkPolicy {name}: expected policyTypes [Ingress]")
    for rule in doc["spec"].get("ingress", []):
        if not rule.get("from"):
            raise Failed(f"NetworkPolicy {name}: a rule without peers lets every pod in")
        for peer in rule["from"]:
            if not peer:
                raise Failed(f"NetworkPolicy {name}: an empty peer")
        for port in rule.get("ports", []):
            if port["port"] not in opened:
                raise Failed(f"NetworkPolicy {name}: port {port['port']} is no port of its pods")


def main() -> int:
    rendered, crd_path, *expected = sys.argv[1:]
    with open(crd_path, encoding="utf-8") as f:
        crd = yaml.safe_load(f)
    schemas = {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}
    with open(rendered, encoding="utf-8") as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    deployments = [d for d in documents if d.get("kind") == "Deployment"]
    try:
        for doc in documents:
            kind = doc.get("kind")
            if kind == "ScaledObject":
                check_scaled_object(doc, schemas)
            elif kind == "ServiceMonitor":
                check_service_monitor(doc)
            elif kind == "Deployment":
                check_deployment(doc)
            elif kind == "NetworkPolicy":
                check_network_policy(doc, deployments)
        counts = collections.Counter(d.get("kind") for d in documents)
        for item in expected:
            kind, count = item.split("=")
            if counts[kind] != int(count):
                raise Failed(f"{counts[kind]} {kind} rendered, expected {count}")
    except Failed as err:
        print(f"{rendered}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
