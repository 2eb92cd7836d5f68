#!/usr/bin/env bash
# End-to-end check of `tinyscale check grad` (label app): the table lists every op as passing, the
# JSON has one object per op and a summary, and another seed passes too. A failing op's non-zero
# exit is covered by the unit tests (test_gradcheck_cases.cpp). Usage: check_grad.sh TINYSCALE
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_grad: $*" >&2; exit 1; }

"$bin" check grad --json "$work/grad.json" > "$work/out.txt" || fail "exit status $? (an op failed?)"
grep -q "| matmul (batched) | 3 |" "$work/out.txt" || fail "no matmul row in the table"
grep -q "ops checked in .* s: all pass" "$work/out.txt" || fail "no 'all pass' line"
! grep -q "FAIL" "$work/out.txt" || fail "a FAIL row in the table"
grep -q '"passed": true' "$work/grad.json" || fail "JSON lacks passed: true"
for key in op draws elements max_abs_error max_rel_error worst_ratio rtol atol summary; do
  grep -q "\"$key\"" "$work/grad.json" || fail "JSON lacks $key"
done
[ "$(grep -c '"op":' "$work/grad.json")" -ge 40 ] || fail "expected >= 40 ops in the JSON"
"$bin" check grad --seed 7 --draws 2 > /dev/null || fail "seed 7 failed"
echo "check_grad: every op passes, table and JSON complete"
