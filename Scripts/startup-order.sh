#!/usr/bin/env bash
# Regenerates Scripts/startup.order: the functions and data the tools touch when they run, which the release
# link lays out first and together (lld's --symbol-ordering-file; see toolLinkerSettings in Package.swift).
#
# Why: unordered, a run of dcat touches code scattered over a 10 MB text segment and data over 2 MB. Every
# read fault on the binary maps the 16 pages around it, every first write to a page of data is a fault and
# a copy, and the exit unmaps it all again. Laid out together, what a run touches takes fewer pages.
#
# How: each tool runs a few typical command lines under valgrind: callgrind lists every function executed,
# lackey every address loaded or stored. Valgrind cannot run the io_uring engine (its rings are memory the
# kernel writes behind valgrind's back), so the runs use the POSIX engine, whose own functions are left
# out; everything else of the URing module, liburing and its shims is added after the first run's. A stale order file is harmless: names that no longer exist are
# ignored, and what is missing from it keeps its place after what is ordered. Regenerate it after a large
# change to what the tools run.
#
# Needs valgrind, binutils and python3. Usage: bash Scripts/startup-order.sh
set -euo pipefail
cd "$(dirname "$0")/.."
unset FUNCTIONS_ONLY
for tool in valgrind strip nm python3; do
    command -v "$tool" > /dev/null || { echo "startup-order.sh: $tool is needed" >&2; exit 1; }
done
# The link reads the order file: an empty one orders nothing.
[ -f Scripts/startup.order ] || : > Scripts/startup.order
swift build -c release --product dcat
swift build -c release --product dcopy
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# valgrind 3.19 cannot read the toolchain's DWARF 5; symbols are all it needs.
for tool in dcat dcopy; do
    cp "$bin/$tool" "$work/$tool"
    strip --strip-debug "$work/$tool"
done
: > "$work/empty"
head -c 300000 /dev/urandom > "$work/small"
head -c 5000000 /dev/urandom > "$work/large"
mkdir -p "$work/tree/a/b"
cp "$work/small" "$work/tree/a/"
cp "$work/large" "$work/tree/a/b/"
: > "$work/tree/empty"
ln -s a "$work/tree/link"

runs=0
# trace TOOL ARGUMENTS...: runs one command line under callgrind and, unless FUNCTIONS_ONLY is set, once
# more under lackey. Standard input is the caller's, read by the callgrind run. A copy goes to "$work/out",
# removed before each run so that both runs take the same path. The tools' own exit status is not checked
# (a missing operand fails on purpose); a run that left no profile stops the script.
trace() {
    local tool=$1
    shift
    runs=$((runs + 1))
    echo "$tool" > "$work/$runs.tool"
    rm -rf "$work/out"
    DISPATCH_ENGINE=posix valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/$runs.cg" \
        "$work/$tool" "$@" > /dev/null 2> "$work/$runs.log" || true
    [ -s "$work/$runs.cg" ] || { cat "$work/$runs.log" >&2; exit 1; }
    if [ -z "${FUNCTIONS_ONLY:-}" ]; then
        rm -rf "$work/out"
        DISPATCH_ENGINE=posix valgrind --tool=lackey --trace-mem=yes --log-file="$work/$runs.trace" \
            "$work/$tool" "$@" > /dev/null 2>&1 < /dev/null || true
        # Only data accesses (" L", " S", " M"): the instruction lines are most of the trace.
        grep -E '^ [LSM] ' "$work/$runs.trace" > "$work/$runs.mem" || true
        rm -f "$work/$runs.trace"
    fi
}
# The empty file first: the shortest run is the one whose pages matter most.
trace dcat "$work/empty"
trace dcat "$work/small" "$work/large" "$work/missing" "$work/empty"
FUNCTIONS_ONLY=1 trace dcat < "$work/small"
FUNCTIONS_ONLY=1 trace dcat < <(cat "$work/small")
trace dcopy "$work/small" "$work/out"
# An option sends the command line through ArgumentParser, whose reflection reads every protocol
# conformance record of the binary (thousands of small records spread over its read-only data): one small
# copy with -r gathers them, after what the runs without options touch.
trace dcopy -r "$work/small" "$work/out"
# Trees touch little data the runs above do not, and their address traces are large.
FUNCTIONS_ONLY=1 trace dcopy -r "$work/tree" "$work/out"
FUNCTIONS_ONLY=1 trace dcopy -rp "$work/tree" "$work/out"

python3 - "$work" "$runs" > "$work/order" << 'PYTHON'
import bisect, re, subprocess, sys

work, runs = sys.argv[1], int(sys.argv[2])
order, seen = [], set()


def add(name):
    if name in defined and name not in seen:
        seen.add(name)
        order.append(name)


# What each binary defines, once; its data symbols by address, to name what an address trace touches.
# A name defined more than once (a local helper such as `objectdestroyTm` or `$sSqwxx`, which the compiler
# emits in many objects) would move every section that has one, most of them never run: it is left out.
defined, twice, data = set(), set(), {}
for tool in ("dcat", "dcopy"):
    nm = subprocess.run(["nm", "-S", "--defined-only", f"{work}/{tool}"], capture_output=True, text=True)
    names, symbols = set(), []
    for line in nm.stdout.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        name = fields[-1]  # without a size (3 fields): an alias or a label, never a place an address is in
        if name in names:
            twice.add(name)
        names.add(name)
        if len(fields) == 4 and fields[2] not in "tTwW":
            symbols.append((int(fields[0], 16), int(fields[1], 16), name))
    defined |= names
    symbols.sort()
    data[tool] = (symbols, [symbol[0] for symbol in symbols])
defined -= twice
# The POSIX engine is the fallback; the io_uring engine, which valgrind cannot run, is what runs.
posix = re.compile(r"^\$s5URing12POSIXBackend")
engine = re.compile(r"^(\$s5URing|io_uring_|__io_uring_|curing_)")

# Functions, as callgrind names them: "fn=(12) name" the first time, "fn=(12)" after, and the same for
# called functions (cfn=); a trailing "'2" marks a recursion level. PLT stubs have addresses for names.
# The first run's functions, then the io_uring engine and liburing (which the POSIX runs do not reach),
# then the other runs' functions.
for run in range(1, runs + 1):
    for line in open(f"{work}/{run}.cg", errors="replace"):
        match = re.match(r"^c?fn=(?:\(\d+\))?\s*(\S.*)$", line.rstrip("\n"))
        if match and not posix.match(match.group(1)):
            add(re.sub(r"'\d+$", "", match.group(1)))
    if run == 1:
        for name in sorted(defined):
            if engine.match(name) and not posix.match(name):
                add(name)
# Data: the variables, constants and metadata records behind every address loaded, stored or modified
# (lackey's " L address,size", " S …", " M …").
for run in range(1, runs + 1):
    try:
        trace = open(f"{work}/{run}.mem")
    except FileNotFoundError:
        continue
    symbols, starts = data[open(f"{work}/{run}.tool").read().strip()]
    for line in trace:
        address = int(line[3:].split(",")[0], 16)
        index = bisect.bisect_right(starts, address) - 1
        if index >= 0 and address < symbols[index][0] + symbols[index][1]:
            add(symbols[index][2])
print("\n".join(order))
PYTHON
mv "$work/order" Scripts/startup.order
echo "Scripts/startup.order: $(wc -l < Scripts/startup.order) names" >&2
# The build does not know the order file is an input of the link: remove the binaries so the next build
# links them anew.
rm -f "$bin/dcat" "$bin/dcopy"
