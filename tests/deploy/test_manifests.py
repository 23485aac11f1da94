"""deploy/: every object is what the Kubernetes API server (and the CRDs of
KServe and prometheus-operator) would accept, and says what the brief of each
folder says it must. The Helm chart is rendered by Helm's own engine."""

import json

import jsonschema
import pytest
import yaml

from .manifests import (
    CHART,
    DEPLOY,
    KUBERNETES_VERSIONS,
    by_kind,
    crd_errors,
    load_documents,
    load_one,
    parse_promql,
    pod_of,
    render_chart,
    validate,
)

KSERVE = DEPLOY / "kserve"
MODELMESH = DEPLOY / "modelmesh"
PVC = {"modelRepository": {"pvc": {"claimName": "models"}}}

# Every values shape the chart is meant for.
CHART_VALUES = {
    "pvc": PVC,
    "everything": {
        "modelRepository": {"pvc": {"create": True, "storageClassName": "fast", "subPath": "repo"}},
        "gpus": 2, "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "autoscaling": {"enabled": True, "maxReplicas": 8,
                        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}},
        "prometheusAdapterRule": {"configMap": True},
        "serverArgs": ["--model-control-mode=poll", "--repository-poll-secs=30"],
        "env": [{"name": "OMP_NUM_THREADS", "value": "1"}],
        "podAnnotations": {"example.com/team": "ml"},
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "imagePullSecrets": [{"name": "registry"}],
        "service": {"type": "LoadBalancer"},
    },
    "s3": {"modelRepository": {"uri": "s3://bucket/model_repository", "credentials": {
        "env": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key", "AWS_DEFAULT_REGION": "eu-west-1"},
        "credentialFile": {"secretName": "triton-credentials"}}}},
    "gcs-existing-secret": {"modelRepository": {"uri": "gs://bucket/models",
                                                "credentials": {"existingSecret": "gcs"}}},
}


def _container(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


# -- every file validates ----------------------------------------------------

@pytest.mark.parametrize("path", sorted(p.relative_to(DEPLOY).as_posix()
                                        for p in list(KSERVE.glob("*.yaml")) + list(MODELMESH.glob("*.yaml"))))
def test_manifest_validates(path):
    for obj in load_documents(DEPLOY / path):
        validate(obj)


@pytest.mark.parametrize("case", sorted(CHART_VALUES))
def test_rendered_chart_validates(case):
    objects = render_chart(CHART_VALUES[case])
    assert by_kind(objects, "Deployment") and by_kind(objects, "Service")
    for obj in objects:
        validate(obj)


def test_the_crd_check_catches_a_wrong_field():
    """The CRD schemas are applied strictly: a misspelt or misplaced field
    fails, as `kubectl apply` (strict field validation) fails."""
    runtime = load_one(KSERVE / "clusterservingruntime.yaml")
    runtime["spec"]["protocolVersion"] = ["v2"]
    assert any("protocolVersion" in e for e in crd_errors(runtime))
    runtime = load_one(KSERVE / "clusterservingruntime.yaml")
    runtime["spec"]["containers"][0]["arg"] = []
    assert any("arg" in e for e in crd_errors(runtime))
    monitor = by_kind(render_chart(CHART_VALUES["everything"]), "ServiceMonitor")[0]
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"  # not a Prometheus duration
    assert crd_errors(monitor)


# -- KServe ------------------------------------------------------------------

def test_kserve_runtime_is_a_triton_runtime():
    runtime = load_one(KSERVE / "clusterservingruntime.yaml")
    assert runtime["kind"] == "ClusterServingRuntime"
    assert runtime["metadata"]["name"] == "kserve-pyserver"
    assert runtime["metadata"]["annotations"]["serving.kserve.io/server-type"] == "tritonserver"
    spec = runtime["spec"]
    assert spec["protocolVersions"] == ["v2", "grpc-v2"]
    formats = {f["name"]: f for f in spec["supportedModelFormats"]}
    assert {"triton", "onnx", "pytorch", "python"} <= set(formats)
    assert formats["triton"] == {"name": "triton", "version": "2", "autoSelect": True, "priority": 1}
    assert spec["annotations"] == {"prometheus.kserve.io/port": "8002", "prometheus.kserve.io/path": "/metrics"}
    (container,) = spec["containers"]
    assert container["name"] == "kserve-container"  # the name KServe merges the predictor into
    # KServe's kserve-tritonserver runtime's container, word for word: no
    # command (the image's entrypoint runs the args), tritonserver first
    assert "command" not in container
    assert container["args"][:6] == ["tritonserver", "--model-store=/mnt/models", "--grpc-port=9000",
                                     "--http-port=8080", "--allow-grpc=true", "--allow-http=true"]
    security = container["securityContext"]
    assert security["runAsNonRoot"] and security["runAsUser"] == 1000
    assert security["readOnlyRootFilesystem"] and security["capabilities"]["drop"] == ["ALL"]
    assert security["allowPrivilegeEscalation"] is False
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in spec["volumes"]
    assert container["resources"]["limits"] and container["resources"]["requests"]
    validate(pod_of(spec["containers"], spec["volumes"]))


def test_kserve_inference_services():
    runtime = load_one(KSERVE / "clusterservingruntime.yaml")
    args = runtime["spec"]["containers"][0]["args"]
    http = load_one(KSERVE / "inferenceservice-http.yaml")["spec"]["predictor"]["model"]
    grpc = load_one(KSERVE / "inferenceservice-grpc.yaml")["spec"]["predictor"]["model"]
    for model in (http, grpc):
        assert model["runtime"] == "kserve-pyserver" and model["modelFormat"]["name"] == "triton"
        assert model["storageUri"]
    assert http["protocolVersion"] == "v2" and "--http-port=8080" in args
    assert grpc["protocolVersion"] == "grpc-v2"
    (port,) = grpc["ports"]
    assert port == {"name": "h2c", "protocol": "TCP", "containerPort": 9000}
    assert f"--grpc-port={port['containerPort']}" in args


# -- ModelMesh ---------------------------------------------------------------

def test_modelmesh_runtime_is_a_triton_runtime():
    runtime = load_one(MODELMESH / "servingruntime.yaml")
    assert runtime["kind"] == "ServingRuntime"
    spec = runtime["spec"]
    assert spec["builtInAdapter"] == {"serverType": "triton", "runtimeManagementPort": 8001,
                                      "memBufferBytes": 134217728, "modelLoadingTimeoutMillis": 90000}
    assert spec["multiModel"] is True and spec["protocolVersions"] == ["grpc-v2"]
    assert spec["grpcEndpoint"] == "port:8085" and spec["grpcDataEndpoint"] == "port:8001"
    (container,) = spec["containers"]
    assert container["command"] == ["/bin/sh"] and container["args"][0] == "-c"
    for flag in ("--model-repository=/models/_triton_models", "--model-control-mode=explicit",
                 "--strict-model-config=false", "--strict-readiness=false", "--allow-http=true",
                 "--allow-sagemaker=false"):
        assert f'"{flag}"' in container["args"][1]
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    validate(pod_of(spec["containers"], spec["volumes"]))
    mm = load_one(MODELMESH / "inferenceservice.yaml")
    assert mm["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "ModelMesh"
    assert mm["spec"]["predictor"]["model"]["runtime"] == runtime["metadata"]["name"]


# -- the Helm chart ----------------------------------------------------------

def test_chart_lints():
    """`helm lint --strict`, at the oldest and newest Kubernetes the files
    are checked for."""
    import helm_python

    for version in KUBERNETES_VERSIONS:
        for values in CHART_VALUES.values():
            report = helm_python.lint(str(CHART), values=values, strict=True, kube_version=version)
            assert not report["errors"], report
            # severity 1 is INFO (only "icon is recommended"); 2 WARNING, 3 ERROR
            assert not [m for m in report["messages"] if m["severity"] > 1], report


def test_chart_needs_a_model_repository():
    import helm_python

    with pytest.raises(helm_python.HelmError, match="a model repository is needed"):
        render_chart({})


def test_chart_deployment():
    objects = render_chart(CHART_VALUES["everything"])
    (deployment,) = by_kind(objects, "Deployment")
    container = _container(deployment)
    assert container["command"] == ["tritonserver"]
    assert container["args"] == ["--model-repository=/models", "--http-port=8000",
                                 "--grpc-port=8001", "--metrics-port=8002",
                                 "--model-control-mode=poll", "--repository-poll-secs=30"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == \
        {"http": 8000, "grpc": 8001, "metrics": 8002}
    assert container["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 300
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert container["image"] == "pyserver:0.1.0"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsNonRoot"]
    assert container["securityContext"]["readOnlyRootFilesystem"]
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "demo-pyserver-models"
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["models"] == {"name": "models", "mountPath": "/models", "readOnly": True, "subPath": "repo"}
    assert mounts["tmp"]["mountPath"] == "/tmp"
    (claim,) = by_kind(objects, "PersistentVolumeClaim")
    assert claim["metadata"]["name"] == "demo-pyserver-models"
    # CPU only by default: no GPU limit at all
    cpu = _container(by_kind(render_chart(PVC), "Deployment")[0])
    assert "nvidia.com/gpu" not in cpu["resources"]["limits"]
    assert "nvidia.com/gpu" not in json.dumps(cpu)


def test_chart_service_and_monitor():
    objects = render_chart(CHART_VALUES["everything"])
    (deployment,) = by_kind(objects, "Deployment")
    (service,) = by_kind(objects, "Service")
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == \
        {"http": (8000, "http"), "grpc": (8001, "grpc"), "metrics": (8002, "metrics")}
    assert service["spec"]["type"] == "LoadBalancer"
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (monitor,) = by_kind(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert not by_kind(render_chart(PVC), "ServiceMonitor")


def test_chart_autoscaling_on_queue_time():
    objects = render_chart(CHART_VALUES["everything"])
    (hpa,) = by_kind(objects, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": "demo-pyserver"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 8)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "avg_time_queue_us"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "1000"}
    # the adapter's rule, as the chart's ConfigMap and as values for its chart: one rule
    (config_map,) = by_kind(objects, "ConfigMap")
    (rule,) = yaml.safe_load(config_map["data"]["config.yaml"])["rules"]
    adapter_values = load_one(DEPLOY / "helm" / "prometheus-adapter-values.yaml")
    assert adapter_values["rules"]["custom"] == [rule]
    assert rule["name"]["as"] == metric["pods"]["metric"]["name"]
    assert rule["seriesQuery"].startswith("nv_inference_queue_duration_us{")
    assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
    query = rule["metricsQuery"]
    numerator, denominator = query.split(" / ")
    assert "rate(nv_inference_queue_duration_us{<<.LabelMatchers>>}[1m])" in numerator
    assert "rate(nv_inference_request_success{<<.LabelMatchers>>}[1m])" in denominator
    assert query.count("by (<<.GroupBy>>)") == 2
    parse_promql(rule["seriesQuery"])
    parsed = parse_promql(query)
    assert type(parsed).__name__ == "BinaryExpr"
    assert not by_kind(render_chart(PVC), "HorizontalPodAutoscaler")
    assert by_kind(render_chart(PVC), "Deployment")[0]["spec"]["replicas"] == 1


def test_chart_object_storage_credentials():
    objects = render_chart(CHART_VALUES["s3"])
    container = _container(by_kind(objects, "Deployment")[0])
    assert "--model-repository=s3://bucket/model_repository" in container["args"]
    (secret,) = by_kind(objects, "Secret")
    assert secret["stringData"] == {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key",
                                    "AWS_DEFAULT_REGION": "eu-west-1"}
    assert container["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}}]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TRITON_CLOUD_CREDENTIAL_PATH"] == "/etc/pyserver/credentials/credentials.json"
    pod = by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["cloud-credentials"]["secret"]["secretName"] == "triton-credentials"
    assert "models" not in volumes  # no claim with a URI
    # a Secret of the user's own: used, none created
    objects = render_chart(CHART_VALUES["gcs-existing-secret"])
    assert not by_kind(objects, "Secret")
    assert _container(by_kind(objects, "Deployment")[0])["envFrom"] == [{"secretRef": {"name": "gcs"}}]


def test_chart_values_documented_types():
    """values.yaml parses, and what the templates read exists in it."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in ("image", "resources", "gpus", "modelRepository", "serverArgs", "podSecurityContext",
                "securityContext", "serviceMonitor", "autoscaling", "prometheusAdapterRule"):
        assert key in values
    assert set(values["image"]) == {"repository", "tag", "pullPolicy"}
    assert values["gpus"] == 0
    assert values["podSecurityContext"]["runAsUser"] == 1000
    jsonschema.validate(values["ports"], {"type": "object", "additionalProperties": {"type": "integer"}})


def test_chart_values_schema():
    """values.schema.json: Helm refuses misspelt or mistyped values at
    install time (here, at render), and takes every case above."""
    import helm_python

    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)
    for bad in ({"gpu": 1}, {"ports": {"http": "8000"}}, {"serverArgs": ["model-control-mode=poll"]},
                {"modelRepository": {"uri": "/models", "pvc": {"claimName": "m"}}},
                {"image": {"pullPolicy": "Sometimes"}}):
        with pytest.raises(helm_python.HelmError, match="values don't meet the specifications|schema"):
            render_chart({**PVC, **bad})


def test_chart_names_fit():
    """Every name stays a DNS label (63 characters) whatever the release is
    called, and fullnameOverride names everything."""
    long_release = "a-release-name-that-is-long-enough-to-need-cutting-down-x"
    values = {**CHART_VALUES["everything"], "modelRepository": {"pvc": {"create": True}},
              "prometheusAdapterRule": {"configMap": True}}
    for release, extra in ((long_release, {}), ("demo", {"fullnameOverride": "inference"})):
        objects = render_chart({**values, **extra}, name=release)
        names = [o["metadata"]["name"] for o in objects]
        assert all(len(n) <= 63 and not n.endswith("-") for n in names), names
        for obj in objects:
            validate(obj)
        if extra:
            assert set(names) == {"inference", "inference-models", "inference-adapter-rules"}
        (deployment,) = by_kind(objects, "Deployment")
        claim = deployment["spec"]["template"]["spec"]["volumes"]
        assert {"name": "models", "persistentVolumeClaim": {"claimName": by_kind(
            objects, "PersistentVolumeClaim")[0]["metadata"]["name"], "readOnly": True}} in claim
