#!/usr/bin/env bash
# Build the poolwatch sidecar image for amd64 and arm64 without a Docker daemon, write it as one
# multi-architecture OCI archive with a CycloneDX SBOM per architecture, print its digests, and
# prove each architecture serves /metrics (arm64 under qemu emulation).
#
#   scripts/build_image.sh [--platforms linux/amd64,linux/arm64] [--out DIR] [--no-run]
#   scripts/build_image.sh --bases-only   # step 1 alone (CI makes the bases beside its other set-up)
#
# Input: dist/poolwatch-<version>-py3-none-any.whl (built first with `python -m build` when missing).
# Output in DIR (default dist/):
#   poolwatch-<version>-image.oci.tar          the image index (both architectures), tagged IMAGE
#   poolwatch-<version>-image-<arch>.cdx.json  CycloneDX SBOM of each architecture (Python + Debian packages)
#   poolwatch-<version>-image.digests          the index digest and each architecture's manifest digest
# The image is also left in buildah's store as IMAGE (a manifest list) and IMAGE-<arch>.
#
# 1. Bases: no registry is reachable here, so a python:3.11-slim-bookworm-compatible image is made
#    per architecture with debootstrap (Debian bookworm + Debian's python3 3.11; arm64 through
#    qemu-user-static's binfmt handler). Each is cached as an OCI archive under
#    ${POOLWATCH_CACHE:-$HOME/.cache/poolwatch}/images, so a warm run skips debootstrap.
# 2. buildah builds the Dockerfile per architecture (chroot isolation, vfs storage); its build stage
#    runs natively and installs the target's wheels, so no emulation is needed to build.
# 3. Unless --no-run: each architecture's image runs `poolwatch serve` on a loopback port over the
#    seed snapshot; /metrics must show the Mamba pool's gap of -1 and / the status page.
#
# Needs root and the Debian packages buildah debootstrap qemu-user-static binfmt-support curl, plus
# cyclonedx-py (the dev extra). Environment: POOLWATCH_CACHE, POOLWATCH_IMAGE (default
# ghcr.io/poolwatch/poolwatch:<version>, the name the manifests use), POOLWATCH_SMOKE_PORT (19464).
set -euo pipefail
cd "$(dirname "$0")/.."

PLATFORMS=linux/amd64,linux/arm64
OUT=dist
RUN=1
BASES_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --platforms) PLATFORMS=$2; shift ;;
    --out) OUT=$2; shift ;;
    --no-run) RUN=0 ;;
    --bases-only) BASES_ONLY=1 ;;
    *) echo "usage: $0 [--platforms linux/amd64,linux/arm64] [--out DIR] [--no-run] [--bases-only]" >&2; exit 2 ;;
  esac
  shift
done

for tool in buildah debootstrap curl; do
  command -v "$tool" >/dev/null || { echo "build_image: $tool is not installed" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "build_image: must run as root (debootstrap, buildah chroot)" >&2; exit 3; }

PY=${PYTHON:-${POOLWATCH_VENV:-.venv}/bin/python}
[ -x "$PY" ] || PY=python3
CACHE=${POOLWATCH_CACHE:-$HOME/.cache/poolwatch}
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' service/poolwatch/__init__.py)
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE=${POOLWATCH_IMAGE:-ghcr.io/poolwatch/poolwatch:$VERSION}
WHEEL=dist/poolwatch-$VERSION-py3-none-any.whl
MIRROR=${POOLWATCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
PORT=${POOLWATCH_SMOKE_PORT:-19464}
NATIVE=$(dpkg --print-architecture)
B=(buildah --storage-driver vfs --root "$CACHE/containers/storage" --runroot "$CACHE/containers/run")
IFS=, read -r -a ARCHES <<<"${PLATFORMS//linux\//}"
mkdir -p "$CACHE/images" "$OUT"
OUT=$(realpath "$OUT")

log() { echo "build_image: $*" >&2; }
seconds() { date +%s; }
base_name() { echo "localhost/poolwatch-base:bookworm-python3.11-$1"; }

ensure_emulation() {  # binfmt handlers for the architectures this machine cannot run natively
  local arch=$1 qemu
  [ "$arch" = "$NATIVE" ] && return
  qemu=$(case "$arch" in arm64) echo aarch64 ;; amd64) echo x86_64 ;; *) echo "$arch" ;; esac)
  command -v "qemu-$qemu-static" >/dev/null || { log "qemu-user-static is not installed"; exit 3; }
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  [ -e "/proc/sys/fs/binfmt_misc/qemu-$qemu" ] || update-binfmts --enable "qemu-$qemu"
}

make_base_archive() {
  local arch=$1 archive=$2 base tmp rootfs ctr
  base=$(base_name "$arch")
  tmp=$(mktemp -d)
  rootfs=$tmp/rootfs
  log "debootstrap bookworm/$arch (python3, python3-venv) from $MIRROR"
  debootstrap --arch="$arch" --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" "$MIRROR" >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python3"   # where python:3.11-slim has it
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
  ctr=$("${B[@]}" from scratch)
  "${B[@]}" copy "$ctr" "$rootfs/" / >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 --os linux --arch "$arch" "$ctr"
  "${B[@]}" commit --quiet --rm "$ctr" "$base" >/dev/null
  "${B[@]}" push --quiet "$base" "oci-archive:$archive.part:$base"
  mv "$archive.part" "$archive"
  rm -rf "$tmp"
}

ensure_base() {
  local arch=$1 base archive
  base=$(base_name "$arch")
  archive=$CACHE/images/debian-bookworm-python3.11-$arch.oci.tar
  if "${B[@]}" inspect --type image "$base" >/dev/null 2>&1; then
    log "base image $base is in the local store"
  elif [ -f "$archive" ]; then
    log "loading the cached base image $archive"
    "${B[@]}" tag "$("${B[@]}" pull --quiet "oci-archive:$archive")" "$base"
  else
    make_base_archive "$arch" "$archive"
  fi
}

build() {
  local arch=$1
  log "buildah bud (TARGETARCH=$arch) -> $IMAGE-$arch"
  # No --platform: buildah 1.28 carries the first stage's platform over to the next FROM, so the
  # bases are picked by name (each is of its own architecture) and TARGETARCH is passed as Docker sets it.
  "${B[@]}" bud --isolation chroot --pull-never --layers=false --quiet --build-arg "TARGETARCH=$arch" \
    --volume "$CA_BUNDLE:$CA_BUNDLE:ro" --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
    --build-arg "BASE=$(base_name "$arch")" --build-arg "BUILD_BASE=$(base_name "$NATIVE")" \
    --tag "$IMAGE-$arch" --file Dockerfile . >/dev/null
}

sbom() {  # the Python packages in the image's venv, read from its files by cyclonedx-py
  local arch=$1 ctr root site shim
  ctr=$("${B[@]}" from --pull-never --quiet --arch "$arch" "$IMAGE-$arch")
  root=$("${B[@]}" mount "$ctr")
  site=$root/opt/poolwatch/lib/python3.11/site-packages
  shim=$(mktemp)   # a "python" whose sys.path is the standard library and the image's site-packages
  printf '#!/bin/sh\nPYTHONPATH=%q exec %q -S "$@"\n' "$site" "$(command -v python3)" >"$shim"
  chmod +x "$shim"
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) \
    "$(dirname "$PY")/cyclonedx-py" environment --output-reproducible \
    -o "$OUT/poolwatch-$VERSION-image-$arch.cdx.json" "$shim"
  rm -f "$shim"
  # the image itself as the SBOM's subject, and the base's Debian packages beside the Python ones
  "$PY" - "$OUT/poolwatch-$VERSION-image-$arch.cdx.json" "$IMAGE" "$arch" "$root/var/lib/dpkg/status" <<'PYEOF'
import json, sys, urllib.parse
path, image, arch, dpkg_status = sys.argv[1:]
bom = json.load(open(path))
name, _, version = image.rpartition(":")
bom["metadata"]["component"] = {
    "type": "container", "bom-ref": f"{image}-{arch}", "name": name, "version": version,
    "properties": [{"name": "oci:platform", "value": f"linux/{arch}"}],
}
for stanza in open(dpkg_status, encoding="utf-8").read().split("\n\n"):
    fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
    if "installed" not in fields.get("Status", ""):
        continue
    pkg, ver, pkg_arch = fields["Package"], fields["Version"], fields["Architecture"]
    purl = f"pkg:deb/debian/{pkg}@{urllib.parse.quote(ver, safe='')}?arch={pkg_arch}&distro=debian-12"
    bom["components"].append({"type": "library", "bom-ref": purl, "name": pkg, "version": ver, "purl": purl})
json.dump(bom, open(path, "w"), indent=2)
PYEOF
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
}

save() {
  local archive=$OUT/poolwatch-$VERSION-image.oci.tar tmp arch
  "${B[@]}" manifest rm "$IMAGE" >/dev/null 2>&1 || true
  "${B[@]}" manifest create "$IMAGE" >/dev/null
  for arch in "${ARCHES[@]}"; do
    "${B[@]}" manifest add "$IMAGE" "containers-storage:$IMAGE-$arch" >/dev/null
  done
  rm -f "$archive"
  "${B[@]}" manifest push --quiet --all --format oci "$IMAGE" "oci-archive:$archive:$IMAGE"
  tmp=$(mktemp -d)
  tar -xf "$archive" -C "$tmp" index.json
  "$PY" - "$archive" "$tmp/index.json" "$IMAGE" >"$OUT/poolwatch-$VERSION-image.digests" <<'PYEOF'
import json, sys, tarfile
archive, index_path, image = sys.argv[1:]
(entry,) = json.load(open(index_path))["manifests"]
print(f"{image}@{entry['digest']}  index")
with tarfile.open(archive) as tar:
    index = json.load(tar.extractfile("blobs/" + entry["digest"].replace(":", "/")))
for m in index["manifests"]:
    print(f"{image}@{m['digest']}  {m['platform']['os']}/{m['platform']['architecture']}")
PYEOF
  rm -rf "$tmp"
  log "saved $archive"
}

SMOKE_CTR=""
SMOKE_PID=""
# shellcheck disable=SC2317  # called by the EXIT trap and after each smoke run
stop_smoke() {
  if [ -n "$SMOKE_PID" ]; then
    kill -TERM -- "-$SMOKE_PID" 2>/dev/null || true   # the process group setsid gave it
    wait "$SMOKE_PID" 2>/dev/null || true
  fi
  if [ -n "$SMOKE_CTR" ]; then
    "${B[@]}" rm "$SMOKE_CTR" >/dev/null 2>&1 || true
  fi
  SMOKE_PID=""
  SMOKE_CTR=""
}

smoke() {
  local arch=$1 metrics gap machine
  trap stop_smoke EXIT
  SMOKE_CTR=$("${B[@]}" from --pull-never --quiet --arch "$arch" "$IMAGE-$arch")
  machine=$("${B[@]}" run --isolation chroot "$SMOKE_CTR" -- python3 -c 'import platform; print(platform.machine())')
  log "running the $arch image ($machine) on 127.0.0.1:$PORT over the seed snapshot"
  setsid "${B[@]}" run --isolation chroot \
    --volume "$PWD/tests/fixtures/seed-snapshot.json:/data/seed.json:ro" "$SMOKE_CTR" -- \
    poolwatch serve --host 127.0.0.1 --port "$PORT" --snapshot-files /data/seed.json \
    >"$CACHE/smoke-$arch.log" 2>&1 &
  SMOKE_PID=$!
  for _ in $(seq 1 240); do   # emulated start-up takes a while
    metrics=$(curl -fsS "http://127.0.0.1:$PORT/metrics" 2>/dev/null) && break
    kill -0 "$SMOKE_PID" 2>/dev/null || { cat "$CACHE/smoke-$arch.log" >&2; exit 1; }
    sleep 0.5
  done
  gap=""
  for _ in $(seq 1 60); do
    gap=$(curl -fsS "http://127.0.0.1:$PORT/metrics" | grep '^poolwatch_pool_conservation_gap_slots{.*pool="mamba"' || true)
    [ -n "$gap" ] && break
    sleep 0.5
  done
  echo "$arch $machine $gap"
  [[ "$gap" == *" -1.0" ]] || { log "$arch: expected a Mamba gap of -1, got: ${gap:-nothing}"; exit 1; }
  curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null
  curl -fsS "http://127.0.0.1:$PORT/" | grep -q "<title>poolwatch</title>"
  "${B[@]}" run --isolation chroot "$SMOKE_CTR" -- python3 -c 'import importlib.util as u; assert u.find_spec("torch") is None'
  stop_smoke
  log "the $arch image serves /metrics, /readyz and the status page; it has no torch"
}

start=$(seconds)
if [ "$BASES_ONLY" = 1 ]; then  # each architecture's base at once (downloads overlap emulation)
  pids=()
  for arch in $(printf '%s\n' "$NATIVE" "${ARCHES[@]}" | sort -u); do
    ensure_emulation "$arch"
    ensure_base "$arch" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  log "the bases are ready in $(( $(seconds) - start )) s"
  exit 0
fi
ensure_base "$NATIVE"
for arch in "${ARCHES[@]}"; do
  ensure_emulation "$arch"
  ensure_base "$arch"
done
if [ ! -f "$WHEEL" ]; then
  log "building $WHEEL"
  "$PY" -m build --wheel --outdir dist . >/dev/null
fi
for arch in "${ARCHES[@]}"; do
  build "$arch"
  "${B[@]}" inspect --type image --format \
    "$arch {{.OCIv1.Architecture}} {{.OCIv1.Config.User}} {{.OCIv1.Config.Cmd}} {{.OCIv1.Config.ExposedPorts}}{{\"\\n\"}}" \
    "$IMAGE-$arch"
  sbom "$arch"
done
"${B[@]}" rmi --prune >/dev/null 2>&1 || true   # previous builds, now untagged
save
log "built $IMAGE (${ARCHES[*]}) in $(( $(seconds) - start )) s"
cat "$OUT/poolwatch-$VERSION-image.digests"
if [ "$RUN" = 1 ]; then
  for arch in "${ARCHES[@]}"; do
    smoke "$arch"
  done
fi
