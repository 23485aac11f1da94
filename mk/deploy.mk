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
