#!/usr/bin/env bash
# The test command of the README (and of .ci/run): the whole suite, serially (the engine suite's
# descriptor-leak check must see only its own descriptors), then the whole suite again with the shared
# engine forced to POSIX, so that everything built on `IOEngine.shared` — queues' timers, event sources,
# channels made without an explicit engine, the tools run by ToolTests — also runs on the fallback.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Scripts/install-deps.sh
bash Scripts/fixtures.sh
swift build --build-tests
swift test --skip-build --no-parallel
DISPATCH_ENGINE=posix swift test --skip-build --no-parallel
