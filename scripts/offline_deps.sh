# Sourced by the GPU-machine scripts: an offline machine gets the Debian packages the project
# builds against from .deps/ (../shared/offline-deps/fetch-deps.sh), unpacked into
# /tmp/gphash-deps. Sets LD_LIBRARY_PATH and PATH, and appends CMake's search paths to the array
# `cmake_args`. Returns 1 (changing nothing) when .deps/ holds no packages.
offline_deps() {
  local root=$1 deps=/tmp/gphash-deps f
  ls "$root"/.deps/*.deb >/dev/null 2>&1 || return 1
  mkdir -p "$deps"
  for f in "$root"/.deps/*.deb; do dpkg -x "$f" "$deps"; done
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export PATH="$deps/usr/bin:$PATH"
  cmake_args+=(-DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu"
               -DCMAKE_INCLUDE_PATH="$deps/usr/include")
}
