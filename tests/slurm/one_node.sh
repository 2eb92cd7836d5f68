#!/usr/bin/env bash
# The launch templates on a real Slurm (label slurm; chapter 13). A one-node cluster (munge,
# slurmctld, slurmd) is started in a scratch folder by scripts/slurm_local_cluster and stopped
# at the end, whatever happens. Then:
#   1. launch/mpirun/train_hosts.sh on a one-host hostfile: the reference, 2 ranks under mpirun;
#   2. launch/slurm/one_node.sbatch through sbatch with 2 tasks (srun --mpi=pmix): the placement
#      report names srun, the job and both ranks on this host, and the run ends with the
#      reference's final validation loss, bit for bit;
#   3. the same job again, and task 1 (a rank's process) is SIGKILLed once a checkpoint past
#      step 3 exists: srun ends the step, the job requeues itself, starts again, resumes from the
#      newest checkpoint and ends with the uninterrupted run's final validation loss, bit for bit.
# Slurm holds a requeued job for about two minutes before it schedules it again (its begin
# time); the test moves that begin time to now, as an administrator may, to stay short, once the
# first start's processes are gone (Slurm's hold is what guarantees that on a real cluster).
# Bounded: every wait below has a limit, and ctest's TIMEOUT is the backstop.
# Usage: one_node.sh TINYSCALE SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
cluster=$work/cluster
fail() {
  echo "slurm.one_node: $*" >&2
  for f in "$work"/*.out "$cluster"/slurmctld.log "$cluster"/slurmd.log; do
    [ -f "$f" ] && { echo "--- $f (last 30 lines)" >&2; tail -n 30 "$f" >&2; }
  done
  exit 1
}
cleanup() {
  "$src/scripts/slurm_local_cluster" stop "$cluster" >/dev/null 2>&1 || true
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

eval "$("$src/scripts/slurm_local_cluster" start "$cluster")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$src"

# One run, three launches: 80 steps of the tiny model, a checkpoint after every step (the newest
# 2 kept), so the run lasts long enough to be killed in the middle.
export TINYSCALE=$bin CONFIG=configs/tiny.toml
export TRAIN_ARGS="--set train.steps=80 --set train.eval_batches=2 --set train.log_every=10
  --set train.checkpoint_every=1 --set train.checkpoint_keep_last=2 --set optim.warmup_steps=5"
final() { grep '^final val loss' "$1" | tail -n 1; }

# 1. The reference: mpirun on a hostfile of this one host.
echo "localhost slots=2" >"$work/hostfile"
HOSTFILE=$work/hostfile RANKS_PER_HOST=2 CKPT_DIR=$work/ref launch/mpirun/train_hosts.sh \
  >"$work/mpirun.out" 2>&1 || fail "the mpirun reference failed"
want=$(final "$work/mpirun.out")
[ -n "$want" ] || fail "the mpirun reference printed no final val loss"
grep -q '^placement: 2 ranks on 1 host (mpirun, mpi backend)' "$work/mpirun.out" ||
  fail "mpirun: no placement report naming mpirun"

# 2. The one-node template, 2 tasks on this CPU node.
sbatch_args=(--gpus-per-node=0 --ntasks-per-node=2 --cpus-per-task=1 --time=10)
CKPT_DIR=$work/whole timeout 120 sbatch --wait --output="$work/whole.out" "${sbatch_args[@]}" \
  launch/slurm/one_node.sbatch >/dev/null || fail "the sbatch job failed or took over 120 s"
grep -Eq '^placement: 2 ranks on 1 host \(srun, Slurm job [0-9]+, mpi backend\)' "$work/whole.out" ||
  fail "sbatch: no placement report naming srun and the job"
host=$(hostname)
for r in 0 1; do
  grep -Eq "^\| $r +\| $host +\| $r +\| cpu, 1 thread +\| $r +\|$" "$work/whole.out" ||
    fail "sbatch: the placement report should show rank $r on $host, local rank $r, dp $r"
done
got=$(final "$work/whole.out")
[ "$got" = "$want" ] || fail "under srun the run ended with '$got', under mpirun with '$want'"
echo "slurm.one_node: sbatch (srun --mpi=pmix, 2 tasks) equals mpirun: $got"

# 3. Kill task 1 mid-run; the job requeues itself and resumes.
job=$(CKPT_DIR=$work/killed sbatch --parsable --output="$work/killed.out" "${sbatch_args[@]}" \
  launch/slurm/one_node.sbatch) || fail "sbatch refused the second job"
job=${job%%;*}
state() { scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
rank1=""
for _ in $(seq 600); do # until a checkpoint past step 3 exists (at most 60 s)
  if [ -f "$work/killed/latest" ] && [ "$(sed 's/step_0*//' "$work/killed/latest")" -ge 3 ]; then
    for pid in $(pgrep -x tinyscale || true); do
      environment=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" || true)
      if grep -qx "SLURM_JOB_ID=$job" <<<"$environment" &&
        grep -qx "SLURM_PROCID=1" <<<"$environment"; then rank1=$pid; fi
    done
    [ -n "$rank1" ] && break
  fi
  sleep 0.1
done
[ -n "$rank1" ] || fail "found no running task 1 of job $job after a checkpoint past step 3"
kill -9 "$rank1"
echo "slurm.one_node: killed task 1 (pid $rank1) of job $job after $(cat "$work/killed/latest")"

# Wait for the requeue, start the job again at once, and wait for its end (at most 150 s).
moved=0
for _ in $(seq 300); do
  s=$(state)
  case "$s" in
  COMPLETED) break ;;
  FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
    fail "job $job ended $s instead of requeueing and completing" ;;
  PENDING)
    # Only once the first start's step has ended on the node (its slurmstepd gone): a step
    # started while the old one still cleans up fails (PMIx's socket of the same step id).
    if [ "$moved" -eq 0 ] && scontrol show job "$job" | grep -q 'Restarts=1' &&
      ! pgrep -f "slurmstepd: \[$job\." >/dev/null; then
      scontrol update JobId="$job" StartTime=now && moved=1
    fi ;;
  esac
  sleep 0.5
done
[ "$(state)" = COMPLETED ] || fail "job $job is $(state) after 150 s; expected COMPLETED"

out=$work/killed.out
grep -q '^train_job: a rank failed (srun exit status [0-9]*); requeueing job' "$out" ||
  fail "the job did not say that it requeues after the rank failed"
grep -q "^train_job: job $job, start 2 of at most 4," "$out" || fail "the job did not start again"
[ "$(grep -c '^done:' "$out")" -eq 1 ] || fail "expected one 'done:' line: the first start was killed"
resumed=$(grep -o "^resumed from $work/killed at step [0-9]*" "$out" | grep -o '[0-9]*$') ||
  fail "the requeued job did not resume from $work/killed"
[ "$resumed" -ge 3 ] && [ "$resumed" -lt 80 ] || fail "resumed at step $resumed, expected 3..79"
got=$(final "$out")
[ "$got" = "$want" ] || fail "the requeued job ended with '$got', the uninterrupted run with '$want'"
echo "slurm.one_node: task 1 killed, job $job requeued, resumed at step $resumed, ended equal: $got"
