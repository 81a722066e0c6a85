"""Validates the custom resources of a rendered chart, which kubernetes-validate has no schema for:
each ScaledObject against KEDA's CRD schema (its openAPIV3Schema), and the ServiceMonitor's
fields the chart relies on.

    check_custom.py RENDERED.yaml KEDA_SCALEDOBJECT_CRD.yaml
"""

import sys

import jsonschema
import yaml


def main() -> int:
    rendered, crd_path = sys.argv[1], sys.argv[2]
    with open(crd_path, encoding="utf-8") as f:
        crd = yaml.safe_load(f)
    schemas = {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}
    with open(rendered, encoding="utf-8") as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    for doc in documents:
        kind, api = doc.get("kind"), doc.get("apiVersion", "")
        if kind == "ScaledObject":
            version = api.split("/")[-1]
            if version not in schemas:
                print(f"ScaledObject {api}: KEDA has no such version", file=sys.stderr)
                return 1
            jsonschema.validate(doc, schemas[version])
            trigger = doc["spec"]["triggers"][0]
            for key in ("scalerAddress", "group", "topics", "lagThreshold"):
                if not trigger["metadata"].get(key):
                    print(f"ScaledObject trigger without {key}", file=sys.stderr)
                    return 1
        elif kind == "ServiceMonitor":
            endpoint = doc["spec"]["endpoints"][0]
            if endpoint.get("path") != "/metrics" or not doc["spec"]["selector"]["matchLabels"]:
                print("ServiceMonitor without /metrics or a selector", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
