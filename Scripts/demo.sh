#!/usr/bin/env bash
# The quick start's first command: installs what is missing, builds, and runs the main job on Fixtures/.
# Until dcat and dcopy land, the main job is the engine demo: every fixture file opened, stat'ed, read
# and closed through the io_uring engine, with its size and checksum.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Scripts/install-deps.sh
bash Scripts/fixtures.sh
swift build -c release --product uring-demo
find Fixtures -type f ! -name README.md | sort | xargs .build/release/uring-demo
