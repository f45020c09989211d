#!/usr/bin/env bash
# The test command of the README (and of .ci/run): the whole suite, serially (the engine suite's
# descriptor-leak check must see only its own descriptors), then the whole suite again with the shared
# engine forced to POSIX, so that everything built on `IOEngine.shared` — queues' timers, event sources,
# channels made without an explicit engine, the tools run by ToolTests — also runs on the fallback; then
# the tool tests once more, on the release binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Scripts/install-deps.sh
bash Scripts/fixtures.sh
swift build --build-tests
swift test --skip-build --no-parallel
DISPATCH_ENGINE=posix swift test --skip-build --no-parallel
# The tools' release builds are static executables, unlike the debug ones the suite ran (see Package.swift):
# their tests again, on the binaries the quick start and the benchmarks use.
swift build -c release --product dcat
swift build -c release --product dcopy
DISPATCH_TOOLS_BIN="$(swift build -c release --show-bin-path)" swift test --skip-build --no-parallel --filter ToolTests
