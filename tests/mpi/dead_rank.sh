#!/usr/bin/env bash
# Chapter 12 (label mpi): a rank that dies during data-parallel training under mpirun. With
# `mpiexec --enable-recovery` the job outlives the dead process, and every survivor must fail
# within its deadline naming the op, the group and the dead rank (tests/mpi/test_dead_rank.cpp,
# hidden tag [dead_rank]): rank 2 is SIGKILLed, then exits without MPI_Finalize. Without it
# (mpirun's default) the runtime itself ends the whole job at once and names the dead rank.
# Usage: dead_rank.sh MPIEXEC MPI_TESTS
set -uo pipefail
mpiexec=$1
tests=$2
fail() { echo "dead_rank: $*" >&2; exit 1; }

for mode in kill exit; do
  out=$(TINYSCALE_DEAD_RANK=$mode timeout 120 "$mpiexec" --oversubscribe --enable-recovery -np 4 \
          "$tests" "[dead_rank]" 2>&1)
  echo "--- rank 2 ${mode}ed (mpiexec --enable-recovery):"
  grep "dead-rank check" <<<"$out"
  for r in 0 1 3; do
    grep -q "dead-rank check: rank $r passed" <<<"$out" ||
      { echo "$out" >&2; fail "rank $r did not report the dead rank 2 in time (mode $mode)"; }
  done
  if grep -q "dead-rank check: rank 2" <<<"$out"; then fail "rank 2 was meant to be dead"; fi
done

start=$(date +%s)
out=$(TINYSCALE_DEAD_RANK=kill timeout 120 "$mpiexec" --oversubscribe -np 4 "$tests" "[dead_rank]" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "--- rank 2 killed (plain mpiexec): exit code $rc after ${elapsed} s"
grep "exited on signal" <<<"$out"
[ "$rc" -ne 0 ] || fail "mpiexec succeeded although rank 2 was killed"
[ "$rc" -ne 124 ] || fail "mpiexec hung after rank 2 was killed"
grep -q "process rank 2 .*exited on signal 9" <<<"$out" || { echo "$out" >&2; fail "mpiexec did not name rank 2"; }
[ "$elapsed" -lt 30 ] || fail "the job took ${elapsed} s to end"
echo "dead_rank: every survivor named rank 2 within its deadline; plain mpiexec ended the job"
