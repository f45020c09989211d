#!/usr/bin/env bash
# The test command of the README (and of .ci/run): the whole suite, serially, so that the engine suite's
# descriptor-leak check sees only its own descriptors.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Scripts/install-deps.sh
bash Scripts/fixtures.sh
swift build --build-tests
swift test --skip-build --no-parallel
