#!/usr/bin/env bash
# Build the poolwatch sidecar image without a Docker daemon, then prove it serves /metrics.
#
#   scripts/build_image.sh [--no-run] [--save FILE.oci.tar]
#
# 1. The base image: no registry is reachable here, so a python:3.11-slim-bookworm-compatible
#    image is made with debootstrap (Debian bookworm + python3 3.11 from Debian) and tagged
#    docker.io/library/python:3.11-slim-bookworm, the Dockerfile's FROM. Its OCI archive is
#    cached under ${POOLWATCH_CACHE:-$HOME/.cache/poolwatch}, so a warm run skips debootstrap.
# 2. buildah builds the Dockerfile (chroot isolation, vfs storage: no daemon, no overlayfs).
# 3. Unless --no-run: the image runs `poolwatch serve` on a loopback port over the seed
#    incident's snapshot; /metrics must show the Mamba pool's gap of -1 and / the status page.
#
# Needs root and: apt-get install -y --no-install-recommends buildah debootstrap (+ curl).
# Environment: POOLWATCH_CACHE (cache dir), POOLWATCH_IMAGE (tag, default
# localhost/poolwatch:<version>), POOLWATCH_SMOKE_PORT (default 19464).
set -euo pipefail
cd "$(dirname "$0")/.."

RUN=1
SAVE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-run) RUN=0 ;;
    --save) SAVE=$(realpath -m "$2"); shift ;;
    *) echo "usage: $0 [--no-run] [--save FILE.oci.tar]" >&2; exit 2 ;;
  esac
  shift
done

for tool in buildah debootstrap curl; do
  command -v "$tool" >/dev/null || { echo "build_image: $tool is not installed" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "build_image: must run as root (debootstrap, buildah chroot)" >&2; exit 3; }

CACHE=${POOLWATCH_CACHE:-$HOME/.cache/poolwatch}
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' service/poolwatch/__init__.py)
IMAGE=${POOLWATCH_IMAGE:-localhost/poolwatch:$VERSION}
BASE=docker.io/library/python:3.11-slim-bookworm
BASE_ARCHIVE=$CACHE/images/debian-bookworm-python3.11.oci.tar
MIRROR=${POOLWATCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
PORT=${POOLWATCH_SMOKE_PORT:-19464}
B=(buildah --storage-driver vfs --root "$CACHE/containers/storage" --runroot "$CACHE/containers/run")
mkdir -p "$CACHE/images"

log() { echo "build_image: $*" >&2; }
seconds() { date +%s; }

make_base_archive() {
  local tmp rootfs ctr
  tmp=$(mktemp -d)
  rootfs=$tmp/rootfs
  log "debootstrap bookworm (python3, python3-venv) from $MIRROR"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python3"   # where python:3.11-slim has it
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
  ctr=$("${B[@]}" from scratch)
  "${B[@]}" copy "$ctr" "$rootfs/" / >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 --os linux --arch amd64 "$ctr"
  "${B[@]}" commit --quiet --rm "$ctr" "$BASE" >/dev/null
  "${B[@]}" push --quiet "$BASE" "oci-archive:$BASE_ARCHIVE.part:$BASE"
  mv "$BASE_ARCHIVE.part" "$BASE_ARCHIVE"
  rm -rf "$tmp"
}

ensure_base() {
  if "${B[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
    log "base image $BASE is in the local store"
    return
  fi
  if [ -f "$BASE_ARCHIVE" ]; then
    log "loading the cached base image $BASE_ARCHIVE"
    "${B[@]}" tag "$("${B[@]}" pull --quiet "oci-archive:$BASE_ARCHIVE")" "$BASE"
    return
  fi
  make_base_archive
}

build() {
  log "buildah bud -> $IMAGE"
  "${B[@]}" bud --isolation chroot --pull-never --layers=false --quiet \
    --volume "$CA_BUNDLE:$CA_BUNDLE:ro" --build-arg "VERSION=$VERSION" \
    --tag "$IMAGE" --file Dockerfile . >/dev/null
  "${B[@]}" rmi --prune >/dev/null 2>&1 || true   # the previous build, now untagged
}

SMOKE_CTR=""
SMOKE_PID=""
# shellcheck disable=SC2317  # called by the EXIT trap
stop_smoke() {
  if [ -n "$SMOKE_PID" ]; then
    kill -TERM -- "-$SMOKE_PID" 2>/dev/null || true   # the process group setsid gave it
    wait "$SMOKE_PID" 2>/dev/null || true
  fi
  if [ -n "$SMOKE_CTR" ]; then
    "${B[@]}" rm "$SMOKE_CTR" >/dev/null 2>&1 || true
  fi
}

smoke() {
  local metrics gap
  trap stop_smoke EXIT
  SMOKE_CTR=$("${B[@]}" from --pull-never --quiet "$IMAGE")
  log "running the image on 127.0.0.1:$PORT over the seed snapshot"
  setsid "${B[@]}" run --isolation chroot \
    --volume "$PWD/tests/fixtures/seed-snapshot.json:/data/seed.json:ro" "$SMOKE_CTR" -- \
    poolwatch serve --host 127.0.0.1 --port "$PORT" --snapshot-files /data/seed.json \
    >"$CACHE/smoke.log" 2>&1 &
  SMOKE_PID=$!
  for _ in $(seq 1 120); do
    metrics=$(curl -fsS "http://127.0.0.1:$PORT/metrics" 2>/dev/null) && break
    kill -0 "$SMOKE_PID" 2>/dev/null || { cat "$CACHE/smoke.log" >&2; exit 1; }
    sleep 0.5
  done
  for _ in $(seq 1 40); do
    gap=$(curl -fsS "http://127.0.0.1:$PORT/metrics" | grep '^poolwatch_pool_conservation_gap_slots{.*pool="mamba"' || true)
    [ -n "$gap" ] && break
    sleep 0.5
  done
  echo "$gap"
  [[ "$gap" == *" -1.0" ]] || { log "expected a Mamba gap of -1, got: ${gap:-nothing}"; exit 1; }
  curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null
  curl -fsS "http://127.0.0.1:$PORT/" | grep -q "<title>poolwatch</title>"
  "${B[@]}" run --isolation chroot "$SMOKE_CTR" -- python3 -c 'import importlib.util as u; assert u.find_spec("torch") is None'
  log "the image serves /metrics, /readyz and the status page; it has no torch"
}

start=$(seconds)
ensure_base
build
"${B[@]}" inspect --type image --format '{{.OCIv1.Config.User}} {{.OCIv1.Config.Cmd}} {{.OCIv1.Config.ExposedPorts}}{{"\n"}}' "$IMAGE"
log "built $IMAGE in $(( $(seconds) - start )) s"
if [ -n "$SAVE" ]; then
  "${B[@]}" push --quiet "$IMAGE" "oci-archive:$SAVE:$IMAGE"
  log "saved $SAVE"
fi
if [ "$RUN" = 1 ]; then
  smoke
fi
