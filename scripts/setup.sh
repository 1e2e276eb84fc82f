#!/usr/bin/env bash
# Installs every build, test and tooling dependency of Quill from Debian 12 packages.
# Idempotent; run as root (or with sudo available). Nothing is downloaded from anywhere else.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libdnnl-dev libspdlog-dev libfmt-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev nlohmann-json3-dev zlib1g-dev libpcre2-dev libboost1.81-dev
  python3 python3-grpcio python3-grpc-tools python3-yaml
  prometheus curl
  clang-14 libclang-rt-14-dev llvm-14 lld
)

# Node.js and npm run the official `openai` npm package test (tests/openai). Debian's
# nodejs/npm, unless a node with npm is already installed (e.g. a newer one).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
# Debian's prometheus package starts a system service on install where systemd runs;
# Quill's tests start their own Prometheus on a free port, so the packaged one is not needed.
echo "setup: done"
