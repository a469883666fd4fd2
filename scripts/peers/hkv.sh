#!/usr/bin/env bash
# Builds the HierarchicalKV (NVIDIA Merlin HKV) peer of the evaluation: .peers/hkv/hkv_bench, from
# bench/peers/hkv_bench.cu, HKV's headers and the project's workload sources (src/workload), with one
# plain nvcc command (no CMake). HKV is header-only; its headers come from the merlin-sok 2.1.0 sdist
# on PyPI (third_party/HierarchicalKV/include), downloaded at build time into the git-ignored
# .peers/hkv/ and never committed. Idempotent: an sdist already there (checked against its
# sha256) is not downloaded again, so a machine without internet builds from a carried .peers/hkv;
# the headers are extracted once; the binary is rebuilt only when a source or the command changed.
# Prints the binary's path last.
#   NVCC=PATH          the nvcc to use (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)
#   HKV_ARCH=sm_XX     the GPU architecture (default sm_90)
#   HKV_SDIST=FILE     use this merlin-sok-2.1.0.tar.gz instead of downloading it
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$root/.peers/hkv
version=2.1.0
name=merlin-sok-$version
sdist=$dir/$name.tar.gz
sha256=bd744499effd3bd4e17c95a7bc7eb30cdb89b92eec10313e8f428565a6a02b61
hkv=$dir/$name/third_party/HierarchicalKV
binary=$dir/hkv_bench
arch=${HKV_ARCH:-sm_90}
mkdir -p "$dir"

sdist_ok() { [[ -f $1 ]] && [[ $(sha256sum "$1" | cut -d' ' -f1) == "$sha256" ]]; }

if ! sdist_ok "$sdist"; then
  rm -f "$sdist"
  if [[ -n ${HKV_SDIST:-} ]]; then
    cp "$HKV_SDIST" "$sdist.part"
  else
    echo "hkv.sh: downloading the $name sdist from PyPI into $dir"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # PyPI's simple index names the sdist's URL; pip download is the fallback (it also prepares the
    # sdist's metadata, which needs its build requirements).
    url=$(curl -fsSL --retry 3 https://pypi.org/simple/merlin-sok/ 2>/dev/null |
          grep -o "https://[^\"#]*/$name\.tar\.gz" | head -1 || true)
    if [[ -n $url ]] && curl -fsSL --retry 3 -o "$tmp/$name.tar.gz" "$url"; then
      :
    elif python3 -m pip download --no-deps --no-binary :all: "merlin-sok==$version" -d "$tmp" >"$tmp/pip.log" 2>&1; then
      :
    else
      echo "hkv.sh: cannot download $name.tar.gz (no internet?); put it at $sdist or set HKV_SDIST" >&2
      exit 1
    fi
    mv "$tmp/$name.tar.gz" "$sdist.part"
  fi
  if ! sdist_ok "$sdist.part"; then
    rm -f "$sdist.part"
    echo "hkv.sh: $name.tar.gz does not have the expected sha256 $sha256" >&2
    exit 1
  fi
  mv "$sdist.part" "$sdist"
  rm -f "$dir/.extracted"
fi

# Only HKV's headers and its license.
if [[ ! -f $dir/.extracted || ! -f $hkv/include/merlin_hashtable.cuh ]]; then
  rm -rf "${dir:?}/$name"
  tar -xzf "$sdist" -C "$dir" "$name/third_party/HierarchicalKV/include" "$name/third_party/HierarchicalKV/LICENSE"
  touch "$dir/.extracted"
fi

nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
sources=("$root/bench/peers/hkv_bench.cu" "$root"/src/workload/*.cpp)  # the workload library: standard C++ only
cmd=("$nvcc" -O3 -std=c++20 -arch="$arch" -isystem "$hkv/include" -I "$root/src"
     -Xcompiler -Wall -Xcompiler -Wextra "${sources[@]}" -o "$binary.part")

# Rebuild when the binary is missing, a source or header is newer, or the command changed.
stale=0
[[ -x $binary && -f $dir/build.cmd ]] || stale=1
[[ $stale == 0 && "$(cat "$dir/build.cmd")" != "${cmd[*]}" ]] && stale=1
if [[ $stale == 0 ]]; then
  for f in "${sources[@]}" "$root"/src/workload/*.h "$dir/.extracted"; do
    [[ $f -nt $binary ]] && stale=1 && break
  done
fi
if [[ $stale == 1 ]]; then
  if [[ ! -x $nvcc ]]; then
    if [[ -x $binary ]]; then
      echo "hkv.sh: no nvcc ($nvcc); using the existing $binary, which may be out of date" >&2
      echo "$binary"
      exit 0
    fi
    echo "hkv.sh: no nvcc ($nvcc); set NVCC" >&2
    exit 1
  fi
  echo "hkv.sh: building $binary ($("$nvcc" --version | tail -1))"
  "${cmd[@]}"
  mv "$binary.part" "$binary"
  printf '%s' "${cmd[*]}" >"$dir/build.cmd"
fi
echo "$binary"
