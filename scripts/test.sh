#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test.
# Tests that need root (loop mounts, FUSE) run when this runs as root, as in
# CI; otherwise they print why they were skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v mkfs.xfs >/dev/null || need+=(xfsprogs)
command -v fusermount3 >/dev/null || need+=(fuse3)
command -v zstd >/dev/null || need+=(zstd)
command -v setfattr >/dev/null || need+=(attr)
command -v strace >/dev/null || need+=(strace)
command -v setfacl >/dev/null || need+=(acl)
command -v setcap >/dev/null || need+=(libcap2-bin)  # file capabilities in fuse_rw_posix
command -v xz >/dev/null || need+=(xz-utils)
command -v tar >/dev/null || need+=(tar)
command -v cc >/dev/null || need+=(gcc)  # mimalloc is C, built by cargo
command -v fincore >/dev/null || need+=(util-linux)
[ -x /usr/bin/time ] || need+=(time)  # peak memory of check in tests/check_fuzz.rs
command -v man >/dev/null || need+=(man-db)  # the man pages in tests/docs_cli.rs
command -v mactime >/dev/null || need+=(sleuthkit)  # mactime reads the body files of tests/timeline.rs
[ -f /usr/share/bash-completion/bash_completion ] || need+=(bash-completion)  # its loader in tests/docs_cli.rs
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)  # a destination in tests/extract_refused.rs
# Disk image tests: GPT (sgdisk), MBR (sfdisk), qcow2 (qemu-img), LVM2.
command -v sgdisk >/dev/null || need+=(gdisk)
command -v sfdisk >/dev/null || need+=(fdisk)
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v lvcreate >/dev/null || need+=(lvm2)
# A kernel with XFS quota support under QEMU (this machine's own kernel has
# none): Debian's kernel package, booted with a busybox initramfs.
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v busybox >/dev/null || need+=(busybox)
command -v cpio >/dev/null || need+=(cpio)
ls /boot/vmlinuz-* >/dev/null 2>&1 || need+=(linux-image-amd64)
# xfsprogs 6.15 beside the project (../shared/xfsprogs-6.15: parent pointers,
# exchange-range) runs with these Debian libraries.
if [ -d ../shared/xfsprogs-6.15 ]; then
  for p in liburcu8 libinih1 libblkid1 libuuid1 libdevmapper1.02.1 libselinux1 libudev1; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing packages (${need[*]}); run as root or install them: tests that need them will fail" >&2
  fi
fi
if ! command -v cargo >/dev/null; then
  [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
fi
if [ "$(id -u)" = 0 ] && [ -e /dev/loop-control ]; then
  modprobe xfs 2>/dev/null || true
fi

# Tests that cannot run here (no root, a tool missing) add a line to this
# file; they are reported as skipped, not as passed.
XFSKIT_SKIP_LOG=$(mktemp /tmp/xfskit-skips.XXXXXX)
export XFSKIT_SKIP_LOG
# The main pass serves FUSE mounts from /dev/fuse, as the kernel's default
# (fuse's enable_uring off) makes `xfskit mount` do; io_uring gets its own
# pass below.
uring=/sys/module/fuse/parameters/enable_uring
uring_was=
if [ "$(id -u)" = 0 ] && [ -w "$uring" ]; then
  uring_was=$(cat "$uring")
  echo N > "$uring"
fi
# A clean build: incremental caches would only take disk (CI runs once on a
# fresh clone). The free space is printed because a full disk fails tests in
# ways that look like bugs (mkfs.xfs, the loop mounts).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
free_disk() {
  df -h "${CARGO_TARGET_DIR:-target/..}" "${TMPDIR:-/tmp}" 2>/dev/null | sed 's/^/disk: /' || true
}
free_disk
# Tests build in the test profile (optimised, see Cargo.toml): the engine
# scans real images with thousands of inodes.
# (`|| status=...`: a failed pass is counted and reported, not an early exit.)
status=0
# Each run its own logs: two runs at once (two clones) must not mix them.
test_log=$(mktemp /tmp/xfskit-test.XXXXXX)
# Each stage's wall time, printed at the end (CI's limit is on the whole).
stages=()
t_stage=$(date +%s)
stage_done() { # NAME: the time since the previous stage ended
  local now
  now=$(date +%s)
  stages+=("$(printf '%6d s  %s' $((now - t_stage)) "$1")")
  t_stage=$now
}
cargo test --workspace --no-fail-fast -- --test-threads=2 2>&1 | tee "$test_log" || status=1

stage_done "build and main test pass"

# The read-write mount tests again with FUSE over io_uring (Linux 6.14+):
# `xfskit mount` takes requests through io_uring when the fuse module allows
# it, which it does not by default; root can turn it on for this pass.
if [ -n "$uring_was" ]; then
  echo Y > "$uring"
  # --workspace, as the main pass: the same features, so nothing is rebuilt.
  XFSKIT_TEST_IO_URING=1 cargo test --workspace --no-fail-fast \
    --test fuse_rw_acl --test fuse_rw_copy --test fuse_rw_crash --test fuse_rw_data \
    --test fuse_rw_flags --test fuse_rw_model --test fuse_rw_posix --test fuse_rw_robust \
    -- --test-threads=2 2>&1 | tee -a "$test_log" || status=1
  echo "$uring_was" > "$uring"
else
  # Counted as one skipped pass below (no test of it ran, so none passed).
  uring_skip="io_uring pass of the read-write mount tests: needs root and $uring (Linux 6.14+)"
fi

stage_done "io_uring pass of the read-write mount tests"

# The read-write mount tests again on parent-pointer filesystems (mkfs.xfs
# 6.15 with the xfsprogs 6.18 defaults, xfs_repair -n 6.15), when those
# tools are beside the project.
if [ -d ../shared/xfsprogs-6.15 ]; then
  XFSKIT_TEST_MKFS=6.18 cargo test --workspace --no-fail-fast \
    --test fuse_rw_acl --test fuse_rw_copy --test fuse_rw_crash --test fuse_rw_data \
    --test fuse_rw_flags --test fuse_rw_model --test fuse_rw_posix --test fuse_rw_robust \
    -- --test-threads=2 2>&1 | tee -a "$test_log" || status=1
else
  pptr_skip="read-write mount tests on parent-pointer filesystems: ../shared/xfsprogs-6.15 is missing"
fi

stage_done "parent-pointer pass of the read-write mount tests"

# The Python package (python/): pip builds it (maturin) into a
# fresh virtual environment with pytest, pyarrow, fsspec, moto's S3
# server and boto3 (tests of images in object storage) and ray (the fleet
# scans on a local Ray instance) from PyPI, then
# its tests run (python/tests; those that need root or a tool record why).
py_log=$(mktemp /tmp/xfskit-pytest.XXXXXX)
: > "$py_log"
py_skips=$(mktemp /tmp/xfskit-pyskips.XXXXXX)
if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  py_skip="Python package tests: python3 with venv and ensurepip is missing"
else
  venv=$(mktemp -d /tmp/xfskit-venv.XXXXXX)
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    py_skip="Python package tests: python3 -m venv failed"
  elif ! "$venv/bin/pip" install -q maturin pytest pyarrow fsspec "moto[server]" boto3 ray 2>&1 | tail -n 5; then
    py_skip="Python package tests: pip could not install maturin, pytest, pyarrow, fsspec, moto[server], boto3 and ray (is PyPI reachable?)"
  # The wheel is built in the dev profile, whose settings the test profile
  # inherits unchanged: it reuses what the test pass compiled (target/debug)
  # instead of compiling it all again (`pip install ./python` without this
  # variable, as users run it, is the release build).
  elif ! MATURIN_PEP517_ARGS="--profile dev" "$venv/bin/pip" install -q ./python 2>&1 | tail -n 20; then
    echo "python: pip install ./python failed (above)"
    status=1
  else
    # The pytest script, not `python -m pytest`: that would put python/ first
    # on sys.path, and the source tree's xfskit has no native module.
    (cd python && XFSKIT_SKIP_LOG="$py_skips" "$venv/bin/pytest" -q -p no:cacheprovider --durations=8 tests) \
      2>&1 | tee "$py_log" || status=1
    # The CLI's S3 test against moto's server from this venv (the main pass
    # skipped it when the system's python3 has no moto).
    XFSKIT_TEST_PYTHON="$venv/bin/python" cargo test --workspace --no-fail-fast --test remote \
      -- --test-threads=2 s3_ 2>&1 | tee -a "$test_log" || status=1
  fi
  rm -rf "$venv"
fi
if [ -n "${py_skip:-}" ]; then
  echo "$py_skip"
fi

stage_done "Python package: venv, wheel, pytest, remote"

# Lints: any clippy warning fails the run (when clippy is installed).
if cargo clippy --version >/dev/null 2>&1; then
  if ! cargo clippy --workspace --all-targets -- -D warnings 2>&1 | tail -n 40; then
    echo "clippy: warnings (above) fail the run"
    status=1
  fi
else
  echo "clippy is not installed: lints not checked"
fi

stage_done "clippy"

# A short fuzz run when cargo-fuzz is usable (see fuzz/README.md).
if [ -x fuzz/run.sh ]; then
  fuzz/run.sh short || status=1
fi

stage_done "fuzz (short)"
echo "stage times:"
printf '%s\n' "${stages[@]}"

# Each test file's time (the longest first), so that growth is seen.
echo "test times (seconds; a file run in several passes is listed once per pass):"
awk '/^ *Running /{name=$2; if (name=="unittests") name=$3" "$4} /^test result:/{for(i=1;i<=NF;i++) if($i=="in"){t=$(i+1); sub(/s$/,"",t); printf "%8.1f  %s\n", t, name}}' \
  "$test_log" | sort -rn | sed -n 1,25p
passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$test_log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' "$test_log" | awk '{s+=$1} END {print s+0}')
skipped=$(wc -l < "$XFSKIT_SKIP_LOG")
if [ "$skipped" -gt 0 ]; then
  sed 's/^/  /' "$XFSKIT_SKIP_LOG"
fi
passed=$((passed - skipped))
# pytest counts its own skips apart from its passes.
py_passed=$({ grep -Eo '[0-9]+ passed' "$py_log" || true; } | awk '{n=$1} END {print n+0}')
py_failed=$({ grep -Eo '[0-9]+ (failed|errors?)$|[0-9]+ (failed|errors?)[, ]' "$py_log" || true; } | awk '{s+=$1} END {print s+0}')
passed=$((passed + py_passed))
failed=$((failed + py_failed))
if [ -s "$py_skips" ]; then
  sed 's/^/  /' "$py_skips"
  skipped=$((skipped + $(wc -l < "$py_skips")))
fi
if [ -n "${py_skip:-}" ]; then
  echo "  $py_skip"
  skipped=$((skipped + 1))
fi
rm -f "$py_skips"
if [ -n "${uring_skip:-}" ]; then
  echo "  $uring_skip"
  skipped=$((skipped + 1))
fi
if [ -n "${pptr_skip:-}" ]; then
  echo "  $pptr_skip"
  skipped=$((skipped + 1))
fi
rm -f "$XFSKIT_SKIP_LOG" "$test_log" "$py_log"
free_disk
echo "all tests: $passed passed, $failed failed, $skipped skipped"
exit "$status"
