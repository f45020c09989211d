#!/usr/bin/env bash
# Installs what the package needs beyond the Swift toolchain: liburing's headers and pkg-config, and for
# the tests the acl tools (setfacl, getfacl: dcopy -p's ACL case runs only where they are) and GNU time
# (/usr/bin/time, whose %M the tools' peak-memory tests read), and strace (the tools' device tests read the
# POSIX engine's system calls with it, and are skipped without it).
# Only when missing; on Debian through apt-get (run as root, or with sudo where it exists).
set -euo pipefail
missing=()
command -v pkg-config >/dev/null 2>&1 && pkg-config --exists liburing || missing+=(liburing-dev pkg-config)
command -v setfacl >/dev/null 2>&1 || missing+=(acl)
[ -x /usr/bin/time ] || missing+=(time)
[ -x /usr/bin/strace ] || missing+=(strace)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install ${missing[*]} (needs root)" >&2; exit 1; }
    sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
pkg-config --exists liburing
