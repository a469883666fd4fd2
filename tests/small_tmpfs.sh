#!/usr/bin/env bash
# Runs a test binary with a small tmpfs of its own mounted at $GPHASH_SMALL_TMPFS, so it can fill
# a file system without filling /dev/shm. Mounts directly when allowed (root), else inside a new
# user and mount namespace; exits 77 (ctest: skipped) when neither works.
# Usage: small_tmpfs.sh SIZE TEST_BINARY [ARGS...]
set -uo pipefail
size=$1; shift
dir=$(mktemp -d /tmp/gphash-small-tmpfs.XXXXXX)
trap 'umount "$dir" 2>/dev/null; rmdir "$dir"' EXIT
if mount -t tmpfs -o "size=$size" tmpfs "$dir" 2>/dev/null; then
  GPHASH_SMALL_TMPFS=$dir "$@"
  exit $?
fi
if unshare --user --map-root-user --mount true 2>/dev/null; then
  unshare --user --map-root-user --mount bash -c 'mount -t tmpfs -o "size=$0" tmpfs "$1" && GPHASH_SMALL_TMPFS=$1 exec "${@:2}"' \
    "$size" "$dir" "$@"
  exit $?
fi
echo "small_tmpfs.sh: cannot mount a tmpfs here (not root, no user namespaces): skipped"
exit 77
