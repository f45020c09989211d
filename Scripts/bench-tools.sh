#!/usr/bin/env bash
# Side-by-side benchmark of dcat and dcopy against cat and cp (and the toolchain's DispatchIO on a pipe).
#
# Warm page cache; each case runs the peer and ours one run at a time, in turn (see in_turn), then prints
# the medians, the ratio ours/peer, the target from issue 7 and the peak RSS of each side
# (/usr/bin/time -f %M). Inputs and outputs live in $BENCH_DIR, made once; by default on tmpfs (/dev/shm)
# when there is one, so that both sides measure the copy and not the disk's writeback of the previous run's
# gigabyte (on this machine's ext4, `cp -r` of 10,000 small files swung from 0.6 to 1.9 s with the journal;
# on tmpfs it takes the 75-80 ms the issue quotes). About 4 GiB of memory.
# Usage: bash Scripts/bench-tools.sh [ROUNDS] (default 3: 15 runs per side and case; the start-up cases
# always run 300 times per side).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-3}
if [ -z "${BENCH_DIR:-}" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
    work=/dev/shm/bench-tools
else
    work=${BENCH_DIR:-/tmp/bench-tools}
fi
mkdir -p "$work"

[ -x /usr/bin/time ] || { apt-get update -qq && apt-get install -y -qq time; }

swift build -c release --product dcat >&2
swift build -c release --product dcopy >&2
bin=$(swift build -c release --show-bin-path)
dcat=$bin/dcat
dcopy=$bin/dcopy

# The toolchain's DispatchIO reading standard input to its end, Foundation-less.
dio=/tmp/bench-dispatchio-read
if [ ! -x "$dio" ]; then
    cat > "$dio.swift" <<'EOF'
import Dispatch
#if canImport(Glibc)
import Glibc
#endif
let queue = DispatchQueue(label: "read")
let channel = DispatchIO(type: .stream, fileDescriptor: 0, queue: queue) { _ in }
channel.read(offset: 0, length: Int.max, queue: queue) { done, _, error in
    if done { exit(error == 0 ? 0 : 1) }
}
dispatchMain()
EOF
    swiftc -O "$dio.swift" -o "$dio" >&2
fi

# The issue's reference for start-up: a Swift program that does nothing, its runtime linked statically.
hello=/tmp/bench-swift-hello
if [ ! -x "$hello" ]; then
    echo 'exit(0)' | sed 's/^/import Glibc; /' > "$hello.swift"
    swiftc -O -static-stdlib "$hello.swift" -o "$hello" >&2
fi
# The same program linked as the tools are (a static executable, with lld): no dynamic loader at all. The
# difference between this and dcat of an empty file is what the tools themselves cost at start-up. (The
# linker warns that glibc's dlopen needs shared libraries at run time; nothing here calls it.)
static_hello=/tmp/bench-swift-hello-static
if [ ! -x "$static_hello" ]; then
    swiftc -O -static-executable -use-ld=lld "$hello.swift" -o "$static_hello" >&2
fi

# Inputs, made once.
[ -f "$work/big" ] || head -c $((1 << 30)) /dev/urandom > "$work/big"
: > "$work/empty"
if [ ! -d "$work/small" ]; then
    mkdir -p "$work/small.tmp"
    head -c $((10000 * 4096)) /dev/urandom | split -b 4096 -a 4 -d - "$work/small.tmp/f"
    mv "$work/small.tmp" "$work/small"
fi
if [ ! -d "$work/mid" ]; then
    mkdir -p "$work/mid.tmp"
    head -c $((1000 << 20)) /dev/urandom | split -b $((1 << 20)) -a 3 -d - "$work/mid.tmp/f"
    mv "$work/mid.tmp" "$work/mid"
fi
# A source tree's shape, which the issue does not measure: 10 x 10 x 5 directories, 20 files in each leaf,
# of 100 B to 60 KiB (163 MiB in all).
if [ ! -d "$work/tree" ]; then
    python3 - "$work/tree.tmp" <<'EOF'
import os, sys
sizes = [100, 1000, 3000, 8000, 20000, 60000]
for a in range(10):
    for b in range(10):
        for c in range(5):
            leaf = f"{sys.argv[1]}/a{a}/b{b}/c{c}"
            os.makedirs(leaf)
            for f in range(20):
                with open(f"{leaf}/f{f}.txt", "wb") as out:
                    out.write(os.urandom(sizes[(a * 7 + b * 5 + c * 3 + f) % len(sizes)]))
EOF
    mv "$work/tree.tmp" "$work/tree"
fi
# Warm the page cache.
cat "$work/big" > /dev/null
find "$work/small" "$work/mid" "$work/tree" -type f -exec cat {} + > /dev/null

results=$(mktemp)
trap 'rm -f "$results"' EXIT

# peak_kib COMMAND: peak resident set of one run, in KiB (the shell's own is smaller than any of these).
peak_kib() {
    /usr/bin/time -f %M bash -c "$1" 2>&1 >/dev/null | tail -1
}

# in_turn PREPARE WARMUP COUNT PEER OURS: the median milliseconds of each side, as two words. The sides run
# one at a time, in turn (A B, B A, A B, ...: neither always goes first), each run after PREPARE (not timed),
# without a shell, with nothing on standard input and output and errors dropped; the first WARMUP turns are
# not counted. In turn, not in blocks: this host alternates between spells where a program's threads run at
# once and spells where they wait on each other, lasting about as long as a block of five runs. cat and cp,
# with one thread, hardly feel them; a block of ours landed in one or the other, so dcat of the small files
# read 0.55 or 0.95 of cat in hyperfine's alternating blocks with dcat unchanged, where runs in turn spread
# the spells over both sides alike.
in_turn() {
    python3 - "$@" << 'PYTHON'
import os, shlex, statistics, subprocess, sys, time

prepare, warmup, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
commands = [shlex.split(argument) for argument in sys.argv[4:6]]
null = os.open("/dev/null", os.O_RDWR)
quiet = [(os.POSIX_SPAWN_DUP2, null, fd) for fd in (0, 1, 2)]
times = ([], [])
for turn in range(warmup + count):
    for side in (turn % 2, 1 - turn % 2):
        if prepare != "true":
            subprocess.run(prepare, shell=True, check=True)
        start = time.perf_counter()
        pid = os.posix_spawnp(commands[side][0], commands[side], os.environ, file_actions=quiet)
        _, status = os.waitpid(pid, 0)
        elapsed = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"in_turn: {shlex.join(commands[side])} failed")
        if turn >= warmup:
            times[side].append(elapsed)
print(" ".join(f"{statistics.median(side) * 1000:.3f}" for side in times))
PYTHON
}

# bench NAME TARGET PREPARE PEER OURS: a case, ROUNDS x 5 runs of each side in turn after one warm-up turn.
bench() {
    local medians
    medians=$(in_turn "$3" 1 $((rounds * 5)) "$4" "$5")
    # Two words, the peer's median and ours.
    # shellcheck disable=SC2086
    report "$1" "$2" "$3" "$4" "$5" $medians
}

# report NAME TARGET PREPARE PEER OURS PEER_MS OURS_MS: the case's row, with each side's peak RSS.
report() {
    local name=$1 target=$2 prepare=$3 peer=$4 ours=$5 peerms=$6 oursms=$7
    bash -c "$prepare"
    local peerrss ourrss
    peerrss=$(peak_kib "$peer")
    bash -c "$prepare"
    ourrss=$(peak_kib "$ours")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$peerms" "$oursms" \
        "$(python3 -c "print(f'{$oursms / $peerms:.2f}')")" "$target" "$peerrss" "$ourrss" | tee -a "$results" >&2
}

# bench_start NAME TARGET PEER OURS: a start-up case, a millisecond or two per run, where any swing of the
# host shows: 300 runs of each side in turn after ten warm-up turns. In hyperfine's blocks dcat of an empty
# file read 2.19 ms against cat's 1.17, where 600 runs in turn read 1.66 and 1.29.
bench_start() {
    local medians
    medians=$(in_turn true 10 300 "$3" "$4")
    # shellcheck disable=SC2086
    report "$1" "$2" true "$3" "$4" $medians
}

dst=$work/dst
clean="rm -rf $dst"

# Commands run without a shell; the pipe and redirection cases need one (the same for both).
bench "dcat 1 GiB > /dev/null (vs cat)" "<= 1.10" true \
    "bash -c 'cat $work/big > /dev/null'" "bash -c '$dcat $work/big > /dev/null'"
bench "dcat 1 GiB > file (vs cat)" "<= 0.80" "$clean" \
    "bash -c 'cat $work/big > $dst'" "bash -c '$dcat $work/big > $dst'"
# What writing alone costs: a gigabyte of zeros into a new file, no reading at all. On tmpfs a new file's
# pages are allocated under the inode's lock as the writes arrive, one write at a time, so this is the
# floor of any copy into one new file, dcat's and cat's (whose copy_file_range is one copy, not two).
bench "dd 1 GiB of zeros > file, writing alone (vs cat > file, for reference)" "-" "$clean" \
    "bash -c 'cat $work/big > $dst'" "dd if=/dev/zero of=$dst bs=1M count=1024 status=none"
# Not a target of the issue: many small files, each opened, read and written in turn (dcat *.log).
bench "dcat 10,000 x 4 KiB > /dev/null (vs cat)" "-" true \
    "bash -c 'cat $work/small/* > /dev/null'" "bash -c '$dcat $work/small/* > /dev/null'"
bench "dcopy 1 GiB file (vs cp)" "<= 1.00" "$clean" \
    "cp $work/big $dst" "$dcopy $work/big $dst"
bench "dcopy -r 10,000 x 4 KiB (vs cp -r)" "<= 1.00" "$clean" \
    "cp -r $work/small $dst" "$dcopy -r $work/small $dst"
# Not a target of the issue: the same files named on the command line (cp *.log dir), each looked up by
# its path on the walker's thread instead of found in a directory read.
bench "dcopy 10,000 x 4 KiB named on the command line, into a directory (vs cp)" "-" "$clean; mkdir $dst" \
    "bash -c 'cp $work/small/* $dst'" "bash -c '$dcopy $work/small/* $dst'"
bench "dcopy -r 1,000 x 1 MiB (vs cp -r)" "<= 0.85" "$clean" \
    "cp -r $work/mid $dst" "$dcopy -r $work/mid $dst"
bench "dcopy -r a tree: 611 directories, 10,000 files of 100 B-60 KiB (vs cp -r)" "-" "$clean" \
    "cp -r $work/tree $dst" "$dcopy -r $work/tree $dst"
# Not a target of the issue, but -p is one of its options: a small file's one-submission copy then keeps
# both files open for fchown, fchmod and futimens (Linux 6.8), which cost a hop to a queue and the closes.
bench "dcopy -rp 10,000 x 4 KiB (vs cp -rp)" "-" "$clean" \
    "cp -rp $work/small $dst" "$dcopy -rp $work/small $dst"
bench "pipe: cat big into dcat (vs into cat)" "<= 1.00" true \
    "bash -c 'cat $work/big | cat > /dev/null'" "bash -c 'cat $work/big | $dcat > /dev/null'"
bench "pipe: cat big into dcat (vs into DispatchIO)" "<= 0.50" true \
    "bash -c 'cat $work/big | $dio'" "bash -c 'cat $work/big | $dcat > /dev/null'"
# Not a target of the issue: dcopy of what a pipe gives (a FIFO, /dev/stdin), into a new file.
bench "pipe: cat big into dcopy /dev/stdin file (vs into cp)" "-" "$clean" \
    "bash -c 'cat $work/big | cp /dev/stdin $dst'" "bash -c 'cat $work/big | $dcopy /dev/stdin $dst'"
bench_start "dcat empty file (vs cat)" "<= 1 ms" "cat $work/empty" "$dcat $work/empty"
bench_start "a Swift program doing nothing (vs cat, for reference)" "-" "cat $work/empty" "$hello"
bench_start "the same, a static executable as the tools are (vs cat, for reference)" "-" \
    "cat $work/empty" "$static_hello"
rm -rf "$dst"

echo
echo "| case | peer ms | ours ms | ratio | target | peer RSS KiB | ours RSS KiB |"
echo "| --- | ---: | ---: | ---: | --- | ---: | ---: |"
while IFS=$'\t' read -r name peer ours ratio target peerrss oursrss; do
    echo "| $name | $peer | $ours | $ratio | $target | $peerrss | $oursrss |"
done < "$results"
