#!/bin/sh
# Installs the Debian packages kiln's build and tests need, when they are missing.
# Run as root (CI and the developer machines are); otherwise prints the command to run.
set -e
pkgs="cmake make gcc libc6-dev pkg-config libcmocka-dev libdlpack-dev binutils clang clang-tidy libclang-rt-14-dev valgrind python3-numpy python3-pytest"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "kiln: missing Debian packages:$missing; run: sudo apt-get install$missing" >&2
  exit 1
fi
echo "kiln: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
