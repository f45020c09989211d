#!/usr/bin/env bash
# Completes Fixtures/ with what git cannot store: the empty directory of the nested tree.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p Fixtures/tree/empty
