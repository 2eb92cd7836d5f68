#!/usr/bin/env bash
# The launch templates on a real Slurm (label slurm; chapter 13). A one-node cluster (munge,
# slurmctld, slurmd) is started in a scratch folder by scripts/slurm_local_cluster and stopped
# at the end, whatever happens. Then:
#   0. a job asking for more cores than the node has is refused at submission (not left pending);
#   1. launch/mpirun/train_hosts.sh on a one-host hostfile: the reference, 2 ranks under mpirun;
#   2. launch/slurm/one_node.sbatch through sbatch with 2 tasks (srun --mpi=pmix): the placement
#      report names srun, the job and both ranks on this host, and the run ends with the
#      reference's final validation loss, bit for bit;
#   3. the same job again, and task 1 (a rank's process) is SIGKILLed once a checkpoint past
#      step 3 exists: srun ends the step, the job requeues itself, starts again, resumes from the
#      newest checkpoint and ends with the uninterrupted run's final validation loss, bit for bit;
#   4. the same with Slurm's time-limit warning (SIGUSR1 to the batch script) instead of a kill.
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

# 0. A job the node can never run is refused when submitted, not left pending without a word.
cores=$(nproc)
if sbatch --wait --ntasks=1 --cpus-per-task=$((cores + 1)) --output=/dev/null --wrap true \
  >"$work/too_big.out" 2>&1; then
  fail "a job of $((cores + 1)) cores on a $cores-core node was accepted"
fi
grep -q "More processors requested than permitted" "$work/too_big.out" ||
  fail "a job too big for the node: $(cat "$work/too_big.out")"

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

# 3 and 4 start a job, interrupt it once a checkpoint past step 3 exists, and wait for the
# requeued job to resume and end.
submit() { # submit NAME: the job's id; its checkpoints go to $work/NAME, its output to NAME.out
  local id
  id=$(CKPT_DIR=$work/$1 sbatch --parsable --output="$work/$1.out" "${sbatch_args[@]}" \
    launch/slurm/one_node.sbatch) || fail "sbatch refused job $1"
  echo "${id%%;*}"
}
state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
task_pid() { # task_pid JOB RANK: the pid of that task's tinyscale on this cluster, or nothing
  local pid environment
  for pid in $(pgrep -x tinyscale || true); do
    environment=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" || true)
    if grep -qx "SLURM_CONF=$SLURM_CONF" <<<"$environment" &&
      grep -qx "SLURM_JOB_ID=$1" <<<"$environment" &&
      grep -qx "SLURM_PROCID=$2" <<<"$environment"; then echo "$pid"; fi
  done
}
await_checkpoint() { # await_checkpoint JOB NAME: until a checkpoint past step 3 and task 1 exist
  for _ in $(seq 600); do # at most 60 s
    if [ -f "$work/$2/latest" ] && [ "$(sed 's/step_0*//' "$work/$2/latest")" -ge 3 ] &&
      [ -n "$(task_pid "$1" 1)" ]; then return 0; fi
    [ "$(state "$1")" = COMPLETED ] && fail "job $1 ended before it could be interrupted"
    sleep 0.1
  done
  fail "job $1 wrote no checkpoint past step 3 within 60 s"
}
await_resumed_end() { # await_resumed_end JOB NAME WHY: the requeued job resumes and ends equal
  local job=$1 out=$work/$2.out moved=0 s resumed got
  for _ in $(seq 300); do # at most 150 s
    s=$(state "$job")
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
  [ "$(state "$job")" = COMPLETED ] || fail "job $job is $(state "$job") after 150 s, not COMPLETED"
  grep -q "^train_job: $3; requeueing job $job" "$out" ||
    fail "job $job did not say '$3; requeueing job $job'"
  grep -q "^train_job: job $job, start 2 (" "$out" || fail "job $job did not start again"
  [ "$(grep -c '^done:' "$out")" -eq 1 ] || fail "job $job: expected one 'done:' line"
  resumed=$(grep -o "^resumed from $work/$2 at step [0-9]*" "$out" | grep -o '[0-9]*$') ||
    fail "the requeued job $job did not resume from $work/$2"
  [ "$resumed" -ge 3 ] && [ "$resumed" -lt 80 ] || fail "resumed at step $resumed, expected 3..79"
  got=$(final "$out")
  [ "$got" = "$want" ] || fail "job $job ended with '$got', the uninterrupted run with '$want'"
  echo "slurm.one_node: job $job requeued, resumed at step $resumed, ended equal: $got"
}

# 3. A rank dies: task 1 is SIGKILLed; srun ends the step and the job requeues itself.
job=$(submit killed)
await_checkpoint "$job" killed
pid=$(task_pid "$job" 1)
[ -n "$pid" ] || fail "task 1 of job $job ended before it could be killed"
kill -9 "$pid"
echo "slurm.one_node: killed task 1 of job $job after $(cat "$work/killed/latest")"
await_resumed_end "$job" killed \
  'a rank failed (srun exit status [0-9]*; failure 1 of at most 3)'

# 4. Slurm's warning: SIGUSR1 to the batch script, as --signal=B:USR1@120 sends it before the
# time limit (and before a preemption where the cluster sets PreemptParameters=send_user_signal),
# makes the job requeue itself. Faked here with scancel; it is the same signal to the same process.
job=$(submit warned)
await_checkpoint "$job" warned
scancel --batch --signal=USR1 "$job"
echo "slurm.one_node: sent SIGUSR1 to the batch script of job $job after $(cat "$work/warned/latest")"
await_resumed_end "$job" warned 'SIGUSR1: Slurm warned of the time limit or of preemption'
