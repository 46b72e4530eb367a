#!/usr/bin/env bash
# A hostile user's pass over train, ddprun and ddp_sim: bad flags, files, checkpoints, outputs, mismatched
# ranks, other jobs, small /dev/shm, dying launchers and stopped peers. Each case states what a good
# outcome is (exit status and a message naming what was wrong, or success); the pass classifies every run:
#
#   good     the expected outcome
#   unclear  it failed as it should, but the message does not name the problem
#   silent   it succeeded although the input was bad
#   crash    a signal, an abort or a sanitizer-style report instead of an error
#   hang     it did not end within the case's time limit
#   lost     something at an output path, or a file the run must not touch, was destroyed
#
# Prints one line per case and a summary; exits 1 when any case is not good. Run as root on an idle
# machine (some cases need /dev/null, mount namespaces and signals); about 3 minutes.
#   bash tools/hostile_pass.sh             # every case
#   CASES='save_dev_null save_fifo' KEEP=1 bash tools/hostile_pass.sh   # some cases; keep their outputs
set -uo pipefail
cd "$(dirname "$0")/.."
bazel build //train:train //launch:ddprun //sim:ddp_sim 2>&1 | tail -1
TRAIN=$PWD/bazel-bin/train/train
RUN=$PWD/bazel-bin/launch/ddprun
SIM=$PWD/bazel-bin/sim/ddp_sim
WORK=$(mktemp -d /tmp/hostile.XXXXXX)
if [[ -n ${KEEP:-} ]]; then echo "outputs kept in $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
export DDP_TIMEOUT_S=${DDP_TIMEOUT_S:-10}
QUICK=(--model=mlp --epochs=1 --max_steps=3 --eval_batch_size=1000)
declare -A RESULT
ORDER=()

# run_case NAME LIMIT_S EXPECT REGEX -- COMMAND...
#   EXPECT: fail (nonzero exit, stderr+stdout match REGEX) or ok (exit 0, output matches REGEX); the
#   output is matched as one string, so REGEX may span lines.
run_case() {
  local name=$1 limit=$2 expect=$3 regex=$4
  shift 5
  if [[ -n ${CASES:-} && " $CASES " != *" $name "* ]]; then return; fi
  local out="$WORK/$name.out" start end rc verdict
  start=$(date +%s.%N)
  timeout -k 2 "$limit" "$@" >"$out" 2>&1
  rc=$?
  end=$(date +%s.%N)
  if ((rc == 124 || rc == 137)) && [[ $expect != hang_ok ]]; then
    verdict=hang
  elif grep -qE 'Check failed|terminate called|Aborted|Segmentation fault|AddressSanitizer|core dumped' "$out" ||
    ((rc > 128 && rc != 143)); then
    verdict=crash
  elif [[ $expect == ok ]]; then
    if ((rc == 0)) && grep -qzE -- "$regex" "$out"; then verdict=good; else verdict=unclear; fi
  elif ((rc == 0)); then
    verdict=silent
  elif grep -qzE -- "$regex" "$out"; then
    verdict=good
  else
    verdict=unclear
  fi
  RESULT[$name]=$verdict
  ORDER+=("$name")
  printf '%-28s %-8s rc=%-4s %5.1fs  %s\n' "$name" "$verdict" "$rc" "$(echo "$end - $start" | bc)" \
    "$(grep -vE '^\s*$|^\*+$|Setting OMP|^DDP: ' "$out" | tail -1 | cut -c1-110)"
}

# mark_lost NAME: a case's run destroyed something.
mark_lost() { RESULT[$1]=lost; echo "  $1: lost: $2"; }

# A two-rank job whose ranks get different flags: rank 1 adds the extra arguments.
cat >"$WORK/per_rank.sh" <<EOF
#!/bin/bash
if [[ \$RANK == 1 ]]; then exec $TRAIN "\$@" \$RANK1_EXTRA; else exec $TRAIN "\$@"; fi
EOF
chmod +x "$WORK/per_rank.sh"
two_ranks() { "$RUN" --nproc_per_node=2 --master_port=0 "$@"; }

echo "== flags"
run_case batch_size_zero 20 fail 'batch_size' -- "$TRAIN" "${QUICK[@]}" --batch_size=0
run_case lr_negative 20 fail '\-\-lr' -- "$TRAIN" "${QUICK[@]}" --lr=-1
run_case lr_nan 20 fail '\-\-lr' -- "$TRAIN" "${QUICK[@]}" --lr=nan
run_case model_unknown 20 fail 'model' -- "$TRAIN" "${QUICK[@]}" --model=vgg
run_case threads_zero 20 fail 'threads' -- "$TRAIN" "${QUICK[@]}" --threads=0
run_case checkpoint_every_neg 20 fail 'checkpoint_every' -- "$TRAIN" "${QUICK[@]}" --checkpoint_every=-1
run_case timeout_env_garbage 20 fail 'DDP_TIMEOUT_S' -- env DDP_TIMEOUT_S=abc "$RUN" --nproc_per_node=2 \
  --master_port=0 "$TRAIN" "${QUICK[@]}"
run_case ddprun_nproc_zero 20 fail 'nproc_per_node' -- "$RUN" --nproc_per_node=0 "$TRAIN"
run_case ddprun_nproc_huge 20 fail 'nproc_per_node' -- "$RUN" --nproc_per_node=100000 "$TRAIN"
run_case ddprun_no_program 20 fail 'no_such_program' -- "$RUN" --nproc_per_node=2 --master_port=0 ./no_such_program
run_case rank_out_of_range 20 fail 'RANK' -- env WORLD_SIZE=2 RANK=5 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=29533 "$TRAIN" "${QUICK[@]}"
run_case master_port_garbage 20 fail 'MASTER_PORT' -- env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT=abc "$TRAIN" "${QUICK[@]}"
SIMQ=(predict --synthetic=resnet50 --preset=nvlink)
run_case sim_world_zero 20 fail 'world_size' -- "$SIM" "${SIMQ[@]}" --world_size=0
run_case sim_gbps_zero 20 fail 'gbps(=0| must| .*(positive|above|> ?0))' -- "$SIM" predict --synthetic=resnet50 --alpha_us=10 --gbps=0
run_case sim_negative_batch 20 fail 'batch' -- "$SIM" "${SIMQ[@]}" --batch=-5
run_case sim_negative_caps 20 fail 'cap.*"-1"' -- "$SIM" "${SIMQ[@]}" --caps=-1,5

echo "== input files"
mkdir -p "$WORK/data_trunc" "$WORK/data_bad" "$WORK/data_empty"
cp /usr/share/datasets/fashion-mnist/* "$WORK/data_trunc/"
head -c 100000 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz >"$WORK/data_trunc/train-images-idx3-ubyte.gz"
cp /usr/share/datasets/fashion-mnist/* "$WORK/data_bad/"
head -c 4096 /dev/urandom | gzip >"$WORK/data_bad/train-labels-idx1-ubyte.gz"
cp /usr/share/datasets/fashion-mnist/t10k* "$WORK/data_empty/"
python3 - "$WORK/data_empty" <<'PY'
import gzip, struct, sys
d = sys.argv[1]
with gzip.open(f"{d}/train-images-idx3-ubyte.gz", "wb") as f: f.write(struct.pack(">IIII", 2051, 0, 28, 28))
with gzip.open(f"{d}/train-labels-idx1-ubyte.gz", "wb") as f: f.write(struct.pack(">II", 2049, 0))
PY
run_case data_dir_missing 20 fail '/nonexistent' -- "$TRAIN" "${QUICK[@]}" --data_dir=/nonexistent
run_case data_truncated 30 fail 'train-images' -- "$TRAIN" "${QUICK[@]}" --data_dir="$WORK/data_trunc"
run_case data_bad_labels 30 fail 'train-labels' -- "$TRAIN" "${QUICK[@]}" --data_dir="$WORK/data_bad"
run_case data_empty_train 30 fail 'empty|no training|0 samples|no samples' -- "$TRAIN" "${QUICK[@]}" \
  --data_dir="$WORK/data_empty"
mkdir -p "$WORK/data_fifo" && cp /usr/share/datasets/fashion-mnist/* "$WORK/data_fifo/"
rm "$WORK/data_fifo/t10k-images-idx3-ubyte.gz" && mkfifo "$WORK/data_fifo/t10k-images-idx3-ubyte.gz"
run_case data_fifo 20 fail 't10k-images-idx3-ubyte.gz: it is a FIFO' -- "$TRAIN" "${QUICK[@]}" --data_dir="$WORK/data_fifo"
run_case init_from_fifo 20 fail 'it is a FIFO' -- "$TRAIN" "${QUICK[@]}" \
  --init_from="$WORK/data_fifo/t10k-images-idx3-ubyte.gz"
head -c 5000 /dev/urandom >"$WORK/garbage.safetensors"
run_case init_from_missing 20 fail 'nope.safetensors' -- "$TRAIN" "${QUICK[@]}" --init_from="$WORK/nope.safetensors"
run_case init_from_garbage 20 fail 'garbage.safetensors' -- "$TRAIN" "${QUICK[@]}" --init_from="$WORK/garbage.safetensors"
"$TRAIN" "${QUICK[@]}" --save="$WORK/mlp.safetensors" >/dev/null 2>&1
head -c 3000 "$WORK/mlp.safetensors" >"$WORK/trunc.safetensors"
run_case init_from_truncated 20 fail 'trunc.safetensors' -- "$TRAIN" "${QUICK[@]}" --init_from="$WORK/trunc.safetensors"
run_case init_from_other_model 30 fail 'fc|conv|shape|missing|unexpected' -- "$TRAIN" --model=cnn --epochs=1 \
  --max_steps=2 --init_from="$WORK/mlp.safetensors"
"$TRAIN" "${QUICK[@]}" --save="$WORK/mlp.pt" >/dev/null 2>&1
head -c 100000 "$WORK/mlp.pt" >"$WORK/trunc.pt"
run_case init_from_torch_truncated 20 fail 'trunc.pt: not a readable ZIP archive' -- "$TRAIN" "${QUICK[@]}" \
  --init_from="$WORK/trunc.pt"
cp "$WORK/mlp.pt" "$WORK/flipped.pt" && printf '\x55' | dd of="$WORK/flipped.pt" bs=1 seek=300000 conv=notrunc 2>/dev/null
run_case init_from_torch_flipped 20 fail 'flipped.pt: .*CRC-32 mismatch' -- "$TRAIN" "${QUICK[@]}" \
  --init_from="$WORK/flipped.pt"
head -c 1500 tests/fixtures/torch_save_views_2.15_legacy.pt >"$WORK/legacy_cut.pt"
run_case init_from_torch_legacy_cut 20 fail 'legacy_cut.pt: .*(legacy format|readable pickle)' -- "$TRAIN" \
  "${QUICK[@]}" --init_from="$WORK/legacy_cut.pt"
run_case init_from_exclude_nothing 20 fail 'prefix "head." to keep initial names none of the model.s tensors' -- \
  "$TRAIN" "${QUICK[@]}" --init_from="$WORK/mlp.pt" --init_from_exclude=head.
run_case init_from_torch_other_model 30 fail 'mlp.pt: .*(missing|unexpected)' -- "$TRAIN" --model=cnn --epochs=1 \
  --max_steps=2 --init_from="$WORK/mlp.pt"

echo "== CIFAR folders"
python3 tools/synthetic_cifar10.py "$WORK/cifar" 500 100 >/dev/null
mkdir -p "$WORK/cifar_trunc" "$WORK/cifar_labels" "$WORK/cifar_python"
cp "$WORK"/cifar/*.bin "$WORK/cifar_trunc/" && truncate -s 100000 "$WORK/cifar_trunc/data_batch_2.bin"
cp "$WORK"/cifar/*.bin "$WORK/cifar_labels/" && head -c $((3073 * 20)) /dev/urandom >"$WORK/cifar_labels/test_batch.bin"
for f in data_batch_1 data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch batches.meta; do
  head -c 1000 /dev/urandom >"$WORK/cifar_python/$f"  # the pickled Python version's names, garbage inside
done
CIFAR=(--dataset=cifar10 --model=mlp --epochs=1 --max_steps=3)
run_case cifar_no_data_dir 20 fail 'dataset=cifar10 has no default folder: pass --data_dir' -- "$TRAIN" "${CIFAR[@]}"
run_case cifar_fashion_dir 20 fail 'test_batch.bin: no such file' -- "$TRAIN" "${CIFAR[@]}" \
  --data_dir=/usr/share/datasets/fashion-mnist
run_case cifar_python_garbage 20 fail 'cifar_python/test_batch: not a (readable pickle|CIFAR batch)' -- \
  "$TRAIN" "${CIFAR[@]}" --data_dir="$WORK/cifar_python"
run_case cifar_truncated 20 fail 'data_batch_2.bin: 100000 bytes' -- "$TRAIN" "${CIFAR[@]}" --data_dir="$WORK/cifar_trunc"
run_case cifar_bad_labels 20 fail 'test_batch.bin: label [0-9]+ of record' -- "$TRAIN" "${CIFAR[@]}" \
  --data_dir="$WORK/cifar_labels"
run_case cifar_fashion_weights 30 fail 'fc1.weight' -- "$TRAIN" "${CIFAR[@]}" --data_dir="$WORK/cifar" \
  --init_from="$WORK/mlp.safetensors"
run_case crop_padding_huge 20 fail 'random_crop_padding' -- "$TRAIN" "${CIFAR[@]}" --data_dir="$WORK/cifar" \
  --random_crop_padding=1000

echo "== outputs"
run_case save_dev_null 30 fail '/dev/null' -- "$TRAIN" "${QUICK[@]}" --save=/dev/null
[[ -c /dev/null ]] || { mark_lost save_dev_null "/dev/null is no longer a character device"; rm -f /dev/null; mknod -m 666 /dev/null c 1 3; }
mkfifo "$WORK/fifo"
run_case save_fifo 30 fail 'fifo' -- "$TRAIN" "${QUICK[@]}" --save="$WORK/fifo"
[[ -p $WORK/fifo ]] || mark_lost save_fifo "the FIFO was replaced"
mkdir -p "$WORK/a_dir/keep" && echo keep >"$WORK/a_dir/keep/file"
run_case save_directory 30 fail 'a_dir' -- "$TRAIN" "${QUICK[@]}" --save="$WORK/a_dir"
[[ -f $WORK/a_dir/keep/file ]] || mark_lost save_directory "the directory's contents are gone"
run_case save_missing_parent 30 fail 'no_parent' -- "$TRAIN" "${QUICK[@]}" --save="$WORK/no_parent/w.safetensors"
run_case metrics_dev_full 30 fail '/dev/full' -- "$TRAIN" "${QUICK[@]}" --metrics_out=/dev/full
mkdir -p "$WORK/ckpt"
"$TRAIN" "${QUICK[@]}" --max_steps=4 --checkpoint_dir="$WORK/ckpt" --checkpoint_every=2 >/dev/null 2>&1
cp -a "$WORK/ckpt" "$WORK/ckpt_copy"
run_case resume_other_dataset 30 fail 'trained on --dataset=fashion_mnist, not mnist' -- "$TRAIN" "${QUICK[@]}" \
  --max_steps=6 --checkpoint_dir="$WORK/ckpt" --resume --dataset=mnist --data_dir=/usr/share/datasets/fashion-mnist
diff -r "$WORK/ckpt" "$WORK/ckpt_copy" >/dev/null || mark_lost resume_other_dataset "checkpoints changed"
run_case checkpoint_overwrite 30 fail 'overwrite' -- "$TRAIN" "${QUICK[@]}" --max_steps=4 \
  --checkpoint_dir="$WORK/ckpt" --checkpoint_every=2
diff -r "$WORK/ckpt" "$WORK/ckpt_copy" >/dev/null || mark_lost checkpoint_overwrite "checkpoints changed"
latest=$(ls -d "$WORK"/ckpt/step* 2>/dev/null | sort | tail -1)
if [[ -n $latest ]]; then
  for f in "$latest"/*; do [[ -f $f ]] && head -c 100 "$f" >"$f.tmp" && mv "$f.tmp" "$f"; done
fi
# The newest checkpoint is corrupt: --resume names it and takes the one before; the run then refuses to
# write over the corrupt step without --overwrite_checkpoints (the overwrite guard), so it fails naming both.
run_case resume_corrupt 30 fail 'skipped step-[0-9]+: .*corrupt.*overwrite_checkpoints' -- "$TRAIN" "${QUICK[@]}" --max_steps=6 \
  --checkpoint_dir="$WORK/ckpt" --resume
run_case lr_huge_nonfinite 60 fail 'step|non-finite|NaN|nan|inf' -- "$TRAIN" "${QUICK[@]}" --max_steps=30 --lr=1e30

echo "== ranks that disagree"
run_case sync_bn_one_rank 40 fail 'sync_bn' -- env RANK1_EXTRA=--sync_bn "$RUN" --nproc_per_node=2 \
  --master_port=0 "$WORK/per_rank.sh" --model=cnn_bn --epochs=1 --max_steps=3
run_case zero_one_rank 40 fail 'zero' -- env RANK1_EXTRA=--zero "$RUN" --nproc_per_node=2 --master_port=0 \
  "$WORK/per_rank.sh" "${QUICK[@]}"
run_case save_one_rank 40 fail 'save' -- env RANK1_EXTRA=--save="$WORK/one_rank.safetensors" "$RUN" \
  --nproc_per_node=2 --master_port=0 "$WORK/per_rank.sh" "${QUICK[@]}"
run_case model_per_rank 40 fail 'model' -- env RANK1_EXTRA=--model=cnn "$RUN" --nproc_per_node=2 \
  --master_port=0 "$WORK/per_rank.sh" "${QUICK[@]}"
run_case batch_per_rank 40 fail 'batch_size' -- env RANK1_EXTRA=--batch_size=32 "$RUN" --nproc_per_node=2 \
  --master_port=0 "$WORK/per_rank.sh" "${QUICK[@]}"
cp "$WORK/mlp.safetensors" "$WORK/mlp_other.safetensors"
"$TRAIN" "${QUICK[@]}" --seed=7 --save="$WORK/mlp_other.safetensors" --overwrite_outputs >/dev/null 2>&1 ||
  "$TRAIN" "${QUICK[@]}" --seed=7 --save="$WORK/mlp_other2.safetensors" >/dev/null 2>&1
other=$WORK/mlp_other.safetensors; [[ -f $WORK/mlp_other2.safetensors ]] && other=$WORK/mlp_other2.safetensors
run_case eval_only_stale_copy 40 fail 'weights|hash|differ' -- env RANK1_EXTRA=--init_from="$other" "$RUN" \
  --nproc_per_node=2 --master_port=0 "$WORK/per_rank.sh" --model=mlp --eval_only --init_from="$WORK/mlp.safetensors"

echo "== jobs, launchers and peers"
port=$((20000 + RANDOM % 20000))
env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAIN" "${QUICK[@]}" \
  --max_steps=200 >"$WORK/job1_rank0.out" 2>&1 &
job1=$!
env WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$TRAIN" "${QUICK[@]}" \
  --max_steps=200 >"$WORK/job1_rank1.out" 2>&1 &
job1b=$!
sleep 3
run_case second_job_same_port 30 fail "$port" -- env WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=$port "$TRAIN" "${QUICK[@]}"
kill $job1 $job1b 2>/dev/null; wait $job1 $job1b 2>/dev/null
if [[ -z ${CASES:-} || " $CASES " == *" ddprun_sigkill "* ]]; then
  "$RUN" --nproc_per_node=2 --master_port=0 "$TRAIN" "${QUICK[@]}" --max_steps=100000 --epochs=50 \
    --save="$WORK/after_kill.safetensors" >"$WORK/kill.out" 2>&1 &
  launcher=$!
  for _ in $(seq 100); do grep -q 'epoch 1' "$WORK/kill.out" 2>/dev/null && break; sleep 0.2; done
  workers=$(pgrep -P $launcher | tr '\n' ' ')
  kill -9 $launcher
  sleep 1
  alive=0  # a zombie (state Z, not yet reaped by an init that does not reap) has ended
  for w in $workers; do [[ $(ps -o stat= -p "$w" 2>/dev/null) == [^Z]* ]] && alive=1; done
  ORDER+=(ddprun_sigkill)
  if ((alive)); then RESULT[ddprun_sigkill]=hang; pkill -9 -f "after_kill.safetensors"; else RESULT[ddprun_sigkill]=good; fi
  sleep 1
  [[ -e $WORK/after_kill.safetensors ]] && RESULT[ddprun_sigkill]=lost
  echo "ddprun_sigkill               ${RESULT[ddprun_sigkill]}  (workers: $workers)"
fi
if [[ -z ${CASES:-} || " $CASES " == *" sigterm_rendezvous "* ]]; then
  env WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 1)) DDP_TIMEOUT_S=60 \
    "$TRAIN" "${QUICK[@]}" >"$WORK/rdzv.out" 2>&1 &
  lone=$!
  sleep 2
  kill -TERM $lone
  t0=$(date +%s.%N); wait $lone; rc=$?; t1=$(date +%s.%N)
  took=$(echo "$t1 - $t0" | bc)
  ORDER+=(sigterm_rendezvous)
  if (($(echo "$took < 1.5" | bc))); then RESULT[sigterm_rendezvous]=good; else RESULT[sigterm_rendezvous]=hang; fi
  echo "sigterm_rendezvous           ${RESULT[sigterm_rendezvous]}  rc=$rc ${took}s"
fi
if [[ -z ${CASES:-} || " $CASES " == *" sigstop_peer "* ]]; then
  DDP_TIMEOUT_S=6 "$RUN" --nproc_per_node=2 --master_port=0 "$TRAIN" "${QUICK[@]}" --backend=gloo \
    --max_steps=100000 --epochs=50 >"$WORK/stop.out" 2>&1 &
  launcher=$!
  for _ in $(seq 100); do grep -q 'epoch 1' "$WORK/stop.out" 2>/dev/null && break; sleep 0.2; done
  rank1=$(pgrep -P $launcher | sort -n | tail -1)
  kill -STOP "$rank1"
  timeout 40 tail --pid=$launcher -f /dev/null
  ORDER+=(sigstop_peer)
  if kill -0 $launcher 2>/dev/null; then RESULT[sigstop_peer]=hang; kill -9 $launcher "$rank1"
  elif grep -qE 'rank 1' "$WORK/stop.out"; then RESULT[sigstop_peer]=good
  else RESULT[sigstop_peer]=unclear; fi
  kill -CONT "$rank1" 2>/dev/null; kill -9 "$rank1" 2>/dev/null
  echo "sigstop_peer                 ${RESULT[sigstop_peer]}  $(grep -E 'rank 1' "$WORK/stop.out" | head -1 | cut -c1-110)"
fi
if [[ -z ${CASES:-} || " $CASES " == *" small_dev_shm "* ]] && unshare -m true 2>/dev/null; then
  run_case small_dev_shm 40 fail '/dev/shm' -- unshare -m bash -c "mount -t tmpfs -o size=1m tmpfs /dev/shm && \
    $RUN --nproc_per_node=2 --master_port=0 $TRAIN ${QUICK[*]} --backend=shm"
  run_case small_dev_shm_auto 60 ok 'gloo|Gloo' -- unshare -m bash -c "mount -t tmpfs -o size=1m tmpfs /dev/shm && \
    $RUN --nproc_per_node=2 --master_port=0 $TRAIN ${QUICK[*]}"
fi
# An elastic job's replacement started on a node whose copy of the data differs (one test label changed): it
# must be refused before it registers, naming both copies, and the survivors must finish (exit 0).
if [[ -z ${CASES:-} || " $CASES " == *" replacement_other_data "* ]]; then
  other=$WORK/other_labels
  mkdir -p "$other" && cp /usr/share/datasets/fashion-mnist/*.gz "$other" && rm "$other/t10k-labels-idx1-ubyte.gz"
  zcat /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz | python3 -c 'import sys; b = bytearray(
sys.stdin.buffer.read()); b[8] = (b[8] + 1) % 10; sys.stdout.buffer.write(b)' >"$other/t10k-labels-idx1-ubyte"
  elastic="$TRAIN --model=cnn --epochs=1 --lr_schedule=constant --backend=shm --elastic --max_steps=400 \
--fault_inject_step=5 --fault_inject_rank=2 --fault_inject_point=backward"
  run_case replacement_other_data 120 ok "cannot join the job: it loaded different data.*$other" -- \
    "$RUN" --elastic --max_restarts=1 --nproc_per_node=3 --master_port=0 /bin/sh -c \
    "if [ \"\$DDP_ELASTIC_JOIN\" = 1 ]; then exec $elastic --data_dir=$other; else exec $elastic; fi"
fi
# A container's memory limit: two resnet18 ranks (about 550 MB each) in a 600 MiB memory cgroup. The kernel's
# OOM killer SIGKILLs one; ddprun must say so, naming the limit. ddprun then exits 137 as the worker did,
# which run_case would take for a hang, so the wrapper turns exactly that code into 1.
memory_cgroup_dir() {  # this process's memory cgroup directory (cgroup v1 "memory", else v2), or nothing
  local path
  path=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
  if [[ -n $path && -d /sys/fs/cgroup/memory$path ]]; then echo "/sys/fs/cgroup/memory${path%/}"; return; fi
  path=$(awk -F: '$1 == 0 {print $3}' /proc/self/cgroup)
  [[ -n $path && -f /sys/fs/cgroup${path%/}/memory.max ]] && echo "/sys/fs/cgroup${path%/}"
}
if [[ -z ${CASES:-} || " $CASES " == *" oom_in_memory_cgroup "* ]]; then
  parent=$(memory_cgroup_dir)
  cg=$parent/hostile_pass_$$
  if [[ -n $parent ]] && mkdir "$cg" 2>/dev/null &&
    { echo $((600 << 20)) >"$cg/memory.limit_in_bytes" || echo $((600 << 20)) >"$cg/memory.max"; } 2>/dev/null; then
    run_case oom_in_memory_cgroup 120 fail "OOM killer killed 1 process of this job's memory cgroup.*limit of 600.0 MiB" -- \
      bash -c "echo \$\$ > $cg/cgroup.procs && $RUN --nproc_per_node=2 --master_port=0 $TRAIN --model=resnet18 \
        --epochs=1 --max_steps=3; rc=\$?; ((rc == 137)) && exit 1; exit \$rc"
    rmdir "$cg" 2>/dev/null || { sleep 1; rmdir "$cg"; }
  else
    echo "oom_in_memory_cgroup         skipped: cannot make a memory cgroup here"
    [[ -d $cg ]] && rmdir "$cg"
  fi
fi

echo "== summary"
declare -A COUNT
for name in "${ORDER[@]}"; do COUNT[${RESULT[$name]}]=$((${COUNT[${RESULT[$name]}]:-0} + 1)); done
bad=0
for verdict in good unclear silent crash hang lost; do
  printf '%s %d  ' "$verdict" "${COUNT[$verdict]:-0}"
  [[ $verdict != good ]] && bad=$((bad + ${COUNT[$verdict]:-0}))
done
echo
for name in "${ORDER[@]}"; do [[ ${RESULT[$name]} != good ]] && echo "  not good: $name (${RESULT[$name]})"; done
((bad == 0))
