#!/bin/sh
# Prints the Debian/Ubuntu packages that hold the shared libraries the ELF
# files under the given folders link (ldd, then dpkg -S), one a line, sorted.
# The image's build stage runs it over the installed venv so the runtime stage
# installs exactly those packages and no -dev package or compiler.
#
#   runtime-packages.sh [--require DIR]... DIR...
#
# A library ldd cannot find fails the run when it is linked from under a
# --require folder (pyserver's engine must load); elsewhere (a wheel's
# optional GPU provider, say) it is reported on stderr and skipped. Libraries
# no package owns (those wheels bundle) are skipped.
set -eu

require=""
while [ "${1:-}" = "--require" ]; do
  require="$require $2"
  shift 2
done
[ $# -gt 0 ] || { echo "usage: $0 [--require DIR]... DIR..." >&2; exit 2; }

libs=$(mktemp)
missing=0
trap 'rm -f "$libs"' EXIT

for f in $(find "$@" $require -type f \( -name '*.so' -o -name '*.so.*' \) | sort -u); do
  # Not every .so is an ELF object for this machine (linker scripts, data).
  out=$(ldd "$f" 2>/dev/null) || continue
  if echo "$out" | grep -q "not found"; then
    required=no
    for d in $require; do
      case "$f" in "$d"/*) required=yes ;; esac
    done
    if [ "$required" = yes ]; then
      echo "runtime-packages.sh: $f links a library that is not installed:" >&2
      echo "$out" | grep "not found" >&2
      missing=1
    else
      echo "runtime-packages.sh: skipped (optional): $(basename "$f"):$(echo "$out" | grep 'not found' | awk '{printf " %s", $1}')" >&2
    fi
  fi
  echo "$out" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' >> "$libs"
done
[ "$missing" -eq 0 ] || exit 1

for lib in $(sort -u "$libs"); do
  # dpkg knows a file by the path its package ships (/lib or /usr/lib on a
  # merged-/usr system): try the path, its real path, then the other prefix.
  real=$(readlink -f "$lib")
  for candidate in "$lib" "$real" "/usr$lib" "${lib#/usr}" "/usr$real" "${real#/usr}"; do
    if owner=$(dpkg -S "$candidate" 2>/dev/null); then
      echo "$owner" | head -n 1 | cut -d: -f1
      break
    fi
  done
done | sort -u
