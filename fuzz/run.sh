#!/usr/bin/env bash
# Runs the fuzz targets. `run.sh short` is the CI run (20 s of 'image', then
# 10 s of 'disk'); `run.sh` alone runs 'image' until interrupted, `run.sh
# disk` the disk target. Needs cargo-fuzz (installed here when missing) and
# a nightly toolchain, or stable with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "$0")"
secs=0
# The short run builds without optimizations (with debug assertions and
# overflow checks): it is a smoke test whose build would otherwise take most
# of its time; the long runs are optimized.
profile=(--release)
if [ "${1:-}" = short ]; then secs=${FUZZ_SECONDS:-20}; profile=(--dev); fi

if ! command -v cargo-fuzz >/dev/null && [ ! -x /tmp/cargo-fuzz/bin/cargo-fuzz ]; then
  echo "fuzz: installing cargo-fuzz"
  cargo install -q cargo-fuzz --root /tmp/cargo-fuzz
fi
export PATH="/tmp/cargo-fuzz/bin:$PATH"
toolchain=()
if rustup toolchain list 2>/dev/null | grep '^nightly' >/dev/null; then
  toolchain=(+nightly)
else
  export RUSTC_BOOTSTRAP=1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
zstd -q -d --long=27 ../testdata/fixtures/d_sect4k_ino2k.img.zst -o "$work/base.img"
export XFSKIT_FUZZ_IMAGE="$work/base.img"
mkdir -p "$work/corpus"
# Seeds: a few patches of each kind.
printf '\x00\x00\x10\x00\xff' > "$work/corpus/sb"
printf '\x04\x00\x40\x00\x00\x05\x00\x60\x00\x07' > "$work/corpus/inode"
printf '\x09\x00\x80\x00\x41' > "$work/corpus/block"

# Seeds of the disk target: byte 0 says raw disk (0) or qcow2 (1).
mkdir -p "$work/disk-corpus"
if command -v sgdisk >/dev/null && command -v qemu-img >/dev/null; then
  truncate -s 256K "$work/gpt.img"
  sgdisk -n1:40:200 -t1:8300 -n2:201:400 -t2:8e00 "$work/gpt.img" >/dev/null
  { printf '\x00'; cat "$work/gpt.img"; } > "$work/disk-corpus/gpt"
  qemu-img create -q -f qcow2 -o cluster_size=512 "$work/q.qcow2" 256K
  { printf '\x01'; cat "$work/q.qcow2"; } > "$work/disk-corpus/qcow2"
fi
printf '\x00' > "$work/disk-corpus/empty"

# run_target NAME CORPUS SECONDS: 0 when no crash was found.
run_target() {
  local args=(-rss_limit_mb=3072 -timeout=20)
  [ "$3" -gt 0 ] && args+=(-max_total_time="$3")
  echo "fuzz: running target '$1' ${3:+for ${3}s}"
  set +e
  cargo "${toolchain[@]}" fuzz run "${profile[@]}" "$1" "$2" -- "${args[@]}" > "$work/fuzz-$1.log" 2>&1
  local st=$?
  set -e
  tail -n 15 "$work/fuzz-$1.log"
  return "$st"
}

passed=0 failed=0
# `run.sh disk` fuzzes the disk target alone; the short run does both.
if [ "${1:-}" != disk ]; then
  if run_target image "$work/corpus" "$secs"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
fi
if [ "${1:-}" = disk ] || [ "$secs" -gt 0 ]; then
  dsecs=0
  [ "$secs" -gt 0 ] && dsecs=${FUZZ_DISK_SECONDS:-10}
  if run_target disk "$work/disk-corpus" "$dsecs"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
fi
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
