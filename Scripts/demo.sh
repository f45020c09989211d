#!/usr/bin/env bash
# The quick start's first command: installs what is missing, builds the tools, and runs the main job on
# Fixtures/: dcopy copies the whole tree (nested and empty directories, a symbolic link), dcat prints
# files, and both results are checked against the originals.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Scripts/install-deps.sh
bash Scripts/fixtures.sh
swift build -c release --product dcat
swift build -c release --product dcopy
bin=.build/release
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== dcopy -r -v Fixtures $out/Fixtures"
"$bin/dcopy" -r -v Fixtures "$out/Fixtures"
diff -r --no-dereference Fixtures "$out/Fixtures"
echo "dcopy: the copy is identical to Fixtures/ (diff -r)"

echo "== dcat Fixtures/text/hello.txt Fixtures/text/utf8.txt"
"$bin/dcat" Fixtures/text/hello.txt Fixtures/text/utf8.txt
files=(Fixtures/text/*.txt Fixtures/binary/*.bin Fixtures/empty.txt)
"$bin/dcat" "${files[@]}" | cmp - <(cat "${files[@]}")
echo "dcat: ${#files[@]} files, output identical to cat's"
