# Kubernetes files (deploy/): KServe and ModelMesh runtimes, the Helm chart,
# the Grafana dashboard. Helm's engine comes from PyPI (helm-python-sdk in
# requirements-deploy.txt, a wheel with Helm's Go SDK built in), so neither a
# helm binary nor a cluster is needed here; tests/deploy also runs in `make
# test` (test-python).
.PHONY: test-deploy deploy-template

test-deploy: install
	$(VPY) -m pytest -q tests/deploy

# `helm template` without helm: the chart rendered to stdout.
# make deploy-template DEPLOY_VALUES='{"modelRepository": {"uri": "s3://bucket/models"}}'
DEPLOY_VALUES ?= {"modelRepository": {"pvc": {"claimName": "models"}}}
deploy-template: $(VENV)/.deps
	@$(VPY) -c 'import json, sys, helm_python; c = helm_python.Chart.load("deploy/helm/pyserver"); \
	  out = c.render(json.loads(sys.argv[1]), name="pyserver", namespace="default"); \
	  print("\n---\n".join(v.strip() for k, v in sorted(out.items()) if k.endswith(".yaml") and v.strip()))' '$(DEPLOY_VALUES)'

# Prometheus' own promtool and server (Debian's prometheus package, unpacked
# into build/ rather than installed: installing it would start a daemon) for
# tests/deploy/test_prometheus.py: the autoscaling rule evaluated by
# Prometheus on synthetic series and on a live pyserver it scrapes, and the
# dashboard's queries run there. make test gets it through test-python.
PROMETHEUS_DIR := build/prometheus
PROMTOOL := $(PROMETHEUS_DIR)/usr/bin/promtool

$(PROMTOOL):
	@echo "unpacking Debian's prometheus (promtool, prometheus) into $(PROMETHEUS_DIR)"
	@rm -rf $(PROMETHEUS_DIR) && mkdir -p $(PROMETHEUS_DIR) && \
	  (cd $(PROMETHEUS_DIR) && (apt-get download prometheus >/dev/null 2>&1 || \
	    { SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; $$SUDO apt-get update -qq && apt-get download prometheus >/dev/null; }) && \
	   dpkg -x prometheus_*.deb . && rm -f prometheus_*.deb)
	@test -x $@

.PHONY: prometheus-tools
prometheus-tools: $(PROMTOOL)

test-deploy test-python: prometheus-tools
