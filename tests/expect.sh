#!/usr/bin/env bash
# Runs a command and judges it by its exit code and its output.
#   expect.sh pass REGEX CMD...  exit 0 and a line matching REGEX
#   expect.sh fail REGEX CMD...  exit in 1..127 (an error, not a crash or a
#                                signal) and a line matching REGEX
# The command's output is passed through. Prints "expect: PASS" or
# "expect: FAIL: <why>" last; the exit code is 0 only on PASS.
set -u
mode=$1 regex=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
matched=0
grep -Eq -- "$regex" "$out" && matched=1
case $mode in
  pass)
    if ((rc != 0)); then
      echo "expect: FAIL: exit code $rc (want 0)"; exit 1
    fi ;;
  fail)
    if ((rc == 0 || rc >= 128)); then
      echo "expect: FAIL: exit code $rc (want 1..127)"; exit 1
    fi ;;
  *) echo "expect: FAIL: mode '$mode' is not pass or fail"; exit 2 ;;
esac
if ((!matched)); then
  echo "expect: FAIL: no line matches '$regex'"; exit 1
fi
echo "expect: PASS (exit code $rc, '$regex' found)"
