#!/bin/bash
# Images read in place from S3 against downloading them first. An image of
# SRC (default /usr/share/doc) made by `xfskit build --format qcow2` is put
# in a local S3 server (moto's server mode on 127.0.0.1); then
#   in place   `xfskit ls -R s3://...` and `xfskit cat s3://... FILE`
#              (XFSKIT_REMOTE_STATS: requests and bytes fetched)
#   download   the object fetched whole (boto3's download_file), then the
#              same command on the local copy
# and the same over HTTP from bench/range_server.py in place of moto:
# moto copies the whole object for every ranged GET (about 150 ms for a
# 140 MB object), which a real store does not, so the HTTP rows show the
# cost of the requests themselves. Each is run RUNS times; the best time
# is kept. The outputs must agree. Loopback has no latency to speak of:
# over a real network each in-place request pays a round trip, and the
# download pays the image's size.
#
# Usage: bench/remote.sh
# Env:   RUNS (default 3), SRC (default /usr/share/doc), XFSKIT (default
#        target/release/xfskit, built if missing), VENV (a Python venv with
#        moto[server] and boto3; default: a fresh one in the work directory)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
SRC=${SRC:-/usr/share/doc}
XFSKIT=${XFSKIT:-target/release/xfskit}
[ -x "$XFSKIT" ] || cargo build --release -q -p xfskit-cli
XFSKIT=$(realpath "$XFSKIT")
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/remotebench.XXXXXX")
MOTO_PID=
HTTP_PID=
cleanup() {
  [ -n "$MOTO_PID" ] && kill "$MOTO_PID" 2>/dev/null
  [ -n "$HTTP_PID" ] && kill "$HTTP_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

VENV=${VENV:-$WORK/venv}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import moto, boto3, flask' 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "moto[server]" boto3
fi
PY=$VENV/bin/python

IMG=$WORK/disk.qcow2
"$XFSKIT" build --format qcow2 "$SRC" "$IMG" >/dev/null
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$PY" -m moto.server -H 127.0.0.1 -p "$PORT" >/dev/null 2>&1 &
MOTO_PID=$!
for _ in $(seq 100); do
  "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $PORT))" 2>/dev/null && break
  sleep 0.1
done
export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT AWS_ALLOW_HTTP=true
"$PY" - "$IMG" <<'EOF'
import boto3, os, sys
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
s3.create_bucket(Bucket="bench")
s3.upload_file(sys.argv[1], "bench", "disk.qcow2")
EOF
URL=s3://bench/disk.qcow2
# A file of a few KB somewhere in the tree, found by the local listing.
FILE=$("$XFSKIT" ls -R -l "$IMG" / | awk '/:$/ {d = substr($0, 1, length($0) - 1); if (d == "/") d = ""}
  $1 ~ /^-/ && $5 > 2000 && $5 < 20000 && NF == 8 {print d "/" $8; exit}')
if [ -z "$FILE" ]; then echo "bench/remote.sh: no file of 2-20 KB in $SRC" >&2; exit 1; fi

HPORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$PY" bench/range_server.py "$WORK" "$HPORT" &
HTTP_PID=$!
sleep 1
HURL=http://127.0.0.1:$HPORT/disk.qcow2

best() { sort -n | head -n 1; }
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
download() {
  "$PY" -c "import boto3,os; boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL']).download_file('bench','disk.qcow2','$WORK/copy.qcow2')"
}
hdownload() { "$PY" -c "import urllib.request; urllib.request.urlretrieve('$HURL', '$WORK/copy.qcow2')"; }
dl_then() { "$1"; "$XFSKIT" "$2" "$WORK/copy.qcow2" "${@:3}"; rm -f "$WORK/copy.qcow2"; }

size=$(stat -c %s "$IMG")
entries=$("$XFSKIT" ls -R "$IMG" / | wc -l)
echo "image: $(du -sh "$SRC" | cut -f1) of $SRC as qcow2, $size bytes; $entries lines of ls -R; file $FILE"
for server in s3 http; do
  if [ $server = s3 ]; then u=$URL; get=download; else u=$HURL; get=hdownload; fi
  for what in "ls -R /" "cat $FILE"; do
    set -- $what
    cmd=$1; shift
    [ "$("$XFSKIT" "$cmd" "$u" "$@" | sha256sum)" = "$("$XFSKIT" "$cmd" "$IMG" "$@" | sha256sum)" ] \
      || { echo "bench/remote.sh: $cmd differs in place" >&2; exit 1; }
    t_in=$(for _ in $(seq "$RUNS"); do secs "$XFSKIT" "$cmd" "$u" "$@"; done | best)
    t_dl=$(for _ in $(seq "$RUNS"); do secs dl_then $get "$cmd" "$@"; done | best)
    stats=$(XFSKIT_REMOTE_STATS=1 "$XFSKIT" "$cmd" "$u" "$@" 2>&1 >/dev/null | sed -n 's/^xfskit: remote: //p')
    printf '%-5s %-24s in place %6.3f s (%s)   download + local %6.3f s (%s bytes)\n' \
      "$server" "$cmd $*" "$t_in" "$stats" "$t_dl" "$size"
  done
done
