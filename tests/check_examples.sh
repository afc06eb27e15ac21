#!/bin/sh
# Checks for the README's examples and the demo (tests/CMakeLists.txt registers them):
#   check_examples.sh readme                 the README's ```c block is examples/readme_example.c and
#                                            its ```python block examples/readme_example.py, byte
#                                            for byte (one block of each in README.md)
#   check_examples.sh expect REGEX CMD ...   runs CMD; passes when it exits 0 and its output has a
#                                            line matching REGEX (grep -E)
#   check_examples.sh gpu CMD ...            runs CMD; exit 77 (skipped) when it failed because there
#                                            is no GPU here (no driver, no device, no kernel image)
root=$(cd "$(dirname "$0")/.." && pwd)
mode=$1
shift
case "$mode" in
readme)
  tmp=$(mktemp) || exit 1
  status=0
  for pair in c:readme_example.c python:readme_example.py; do
    lang=${pair%%:*}
    file=$root/examples/${pair#*:}
    fence='```'
    n=$(grep -c "^$fence$lang\$" "$root/README.md")
    if [ "$n" -ne 1 ]; then
      echo "kiln: README.md has $n $fence$lang blocks; expected exactly one, identical to examples/${pair#*:}"
      status=1
      continue
    fi
    awk -v open="$fence$lang" -v end="$fence" 'inside && $0 == end { exit } inside { print } $0 == open { inside = 1 }' \
      "$root/README.md" >"$tmp"
    if diff -u "$file" "$tmp"; then
      echo "kiln: README.md's $fence$lang block is examples/${pair#*:} ($(wc -l <"$file") lines)"
    else
      echo "kiln: README.md's $fence$lang block differs from examples/${pair#*:} (diff above: - file, + README)"
      status=1
    fi
  done
  rm -f "$tmp"
  exit $status
  ;;
expect)
  regex=$1
  shift
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n' "$out"
  if [ $rc -ne 0 ]; then
    echo "kiln: $1 exited with status $rc"
    exit 1
  fi
  if ! printf '%s\n' "$out" | grep -Eq "$regex"; then
    echo "kiln: the output of $1 has no line matching '$regex'"
    exit 1
  fi
  ;;
gpu)
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n' "$out"
  if [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -Eq 'KILN_ERROR_(NO_DRIVER|NO_DEVICE|NO_KERNEL_IMAGE)'; then
    echo "kiln: SKIP: no GPU for $1 here"
    exit 77
  fi
  exit $rc
  ;;
*)
  echo "usage: check_examples.sh readme | expect REGEX CMD [ARGS...] | gpu CMD [ARGS...]"
  exit 2
  ;;
esac
