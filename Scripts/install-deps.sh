#!/usr/bin/env bash
# Installs what the package needs beyond the Swift toolchain: liburing's headers and pkg-config.
# Only when missing; on Debian through apt-get (run as root, or with sudo where it exists).
set -euo pipefail
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists liburing; then
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install liburing-dev and pkg-config (needs root)" >&2; exit 1; }
    sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq liburing-dev pkg-config >/dev/null
pkg-config --exists liburing
