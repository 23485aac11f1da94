"""What tests/deploy reads deploy/ with: the YAML files, the Helm chart
rendered by Helm's own engine, and the validators (Kubernetes' JSON schemas
for built-in kinds, the CRDs' published schemas for custom resources)."""

import copy
import functools
import gzip
import json
import re
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "pyserver"
FIXTURES = Path(__file__).parent / "fixtures"

# The oldest Kubernetes the files promise to work on (autoscaling/v2 and
# seccompProfile are GA, appProtocol is there) and the newest that
# kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.27.0", kubernetes_validate.latest_version())

# (apiVersion, kind) -> fixture with that CRD's openAPIV3Schema (SOURCES.md)
CRD_FIXTURES = {
    ("serving.kserve.io/v1alpha1", "ClusterServingRuntime"):
        "serving.kserve.io_clusterservingruntimes.v1alpha1.json.gz",
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "serving.kserve.io_servingruntimes.v1alpha1.json.gz",
    ("serving.kserve.io/v1beta1", "InferenceService"): "serving.kserve.io_inferenceservices.v1beta1.json.gz",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "monitoring.coreos.com_servicemonitors.v1.json.gz",
}

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def load_documents(path: Path) -> list[dict]:
    """The objects in a YAML file (empty documents left out)."""
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def load_one(path: Path) -> dict:
    (doc,) = load_documents(path)
    return doc


def render_chart(values: dict, name: str = "demo", namespace: str = "serving") -> list[dict]:
    """`helm template` of deploy/helm/pyserver with these values: the objects
    Helm's engine renders (templates that render empty left out)."""
    import helm_python

    with helm_python.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values, name=name, namespace=namespace)
    objects = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        objects += [d for d in yaml.safe_load_all(text) if d]
    return objects


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def validate_builtin(obj: dict) -> None:
    """Kubernetes' own schema for the object's kind, strict (an unknown field
    fails), at each version in KUBERNETES_VERSIONS."""
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def validate_metadata(obj: dict) -> None:
    """CRDs leave metadata to the API server: check it as ObjectMeta, by
    Kubernetes' schema (on a ConfigMap carrying it) and the name rule."""
    meta = obj["metadata"]
    assert DNS_SUBDOMAIN.match(meta["name"]) and len(meta["name"]) <= 253, meta["name"]
    validate_builtin({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})


def _strict(node):
    """An openAPIV3Schema as JSON Schema (draft 4) with the API server's
    strict field validation: an object with declared properties takes no
    others unless it preserves unknown fields; OpenAPI's nullable becomes a
    null type."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) if k in ("items", "anyOf", "allOf", "oneOf", "not") else v
           for k, v in node.items()}
    if "properties" in node:
        out["properties"] = {k: _strict(v) for k, v in node["properties"].items()}
        if "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _strict(node["additionalProperties"])
    if node.get("nullable") and "type" in node:
        out["type"] = [node["type"], "null"]
    return out


@functools.lru_cache(maxsize=None)
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft4Validator:
    with gzip.open(FIXTURES / CRD_FIXTURES[(api_version, kind)], "rt", encoding="utf-8") as f:
        doc = json.load(f)
    assert doc["kind"] == kind and api_version == f"{doc['group']}/{doc['version']}"
    schema = _strict(copy.deepcopy(doc["schema"]))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def crd_errors(obj: dict) -> list[str]:
    """Where obj breaks its CRD's schema (empty: valid)."""
    validator = crd_validator(obj["apiVersion"], obj["kind"])
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(obj)]


def validate(obj: dict) -> None:
    """A built-in kind by Kubernetes' schemas; a custom resource by its CRD's
    schema, its metadata as ObjectMeta."""
    if (obj["apiVersion"], obj["kind"]) in CRD_FIXTURES:
        errors = crd_errors(obj)
        assert not errors, f"{obj['kind']} {obj['metadata'].get('name')}: " + "; ".join(errors)
        validate_metadata(obj)
    else:
        validate_builtin(obj)


def pod_of(containers: list[dict], volumes: list[dict] | None = None) -> dict:
    """A Pod holding these containers: how a runtime's containers (inside a
    custom resource) are checked against Kubernetes' own Container schema."""
    spec = {"containers": containers}
    if volumes:
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": spec}


# What prometheus-adapter puts in its query templates, and Grafana in its
# variables, before Prometheus sees a query: stand-ins of the same shape.
PROMQL_STANDINS = {
    "<<.LabelMatchers>>": 'namespace="serving",pod=~"demo-pyserver-.*"',
    "<<.GroupBy>>": "pod",
    "<<.Series>>": "nv_inference_queue_duration_us",
    "$__rate_interval": "1m",
    "$__interval": "15s",
}


def parse_promql(query: str, variables: dict | None = None):
    """The query as Prometheus parses it (promql-parser; ValueError where
    Prometheus would refuse it), after the stand-ins for the adapter's
    templates and Grafana's variables."""
    import promql_parser

    for key, value in {**PROMQL_STANDINS, **(variables or {})}.items():
        query = query.replace(key, value)
    assert "<<" not in query and "$" not in query, query
    return promql_parser.parse(query)


# -- what a pod runs on pyserver's image ----------------------------------------

# Where the image keeps what the repository has (Dockerfile's COPY lines).
IMAGE_FILES = {"/usr/local/bin/pyserver-entrypoint": ROOT / "docker" / "entrypoint.sh"}


def image_config(dockerfile: Path = ROOT / "Dockerfile") -> dict[str, list[str]]:
    """The runtime stage's ENTRYPOINT and CMD (exec form), as the image has them."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    final = text[text.rindex("\nFROM "):]
    config = {}
    for line in final.splitlines():
        keyword, _, rest = line.strip().partition(" ")
        if keyword in ("ENTRYPOINT", "CMD"):
            config[keyword] = json.loads(rest)
    return config


def pod_argv(container: dict, dockerfile: Path = ROOT / "Dockerfile") -> list[str]:
    """The process a container spec starts on pyserver's image, by
    Kubernetes' rule: `command` replaces the image's ENTRYPOINT (and its CMD
    with it), `args` replaces the CMD; image paths are mapped to the files
    they are copied from."""
    config = image_config(dockerfile)
    if "command" in container:
        argv = [*container["command"], *container.get("args", [])]
    else:
        argv = [*config["ENTRYPOINT"], *container.get("args", config.get("CMD", []))]
    return [str(IMAGE_FILES.get(a, a)) for a in argv]
