#!/usr/bin/env bash
# GRPO with verl 0.9.1 (v1 trainer, TransferQueue), the rollouts run by uniagent.
#   MODEL_PATH=/path/to/hf/model UNIAGENT_BIN=target/release/uniagent bash examples/verl/run_grpo.sh
# Needs: verl with vLLM on GPUs, and `pip install -e python/uniagent-verl` in the same env.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${MODEL_PATH:?set MODEL_PATH to the policy (a Hugging Face model directory)}"
UNIAGENT_BIN="${UNIAGENT_BIN:-uniagent}"
OUT="${OUT:-verl-out}"
NGPUS="${NGPUS:-8}"
mkdir -p "$OUT"

# The service config with the model path filled in.
sed "s|\${MODEL_PATH}|$MODEL_PATH|" examples/verl/file_lookup.yaml > "$OUT/serve.yaml"
export UNIAGENT_BIN UNIAGENT_CONFIG="$PWD/$OUT/serve.yaml"

# verl's dataset from the service's tasks: the first 448 to train on, the last 64 held out.
"$UNIAGENT_BIN" serve "$OUT/serve.yaml" --port 0 > "$OUT/serve.out" 2> "$OUT/serve.log" &
SERVE_PID=$!
trap 'kill "$SERVE_PID" 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q '^listening on ' "$OUT/serve.out" 2>/dev/null && break; sleep 0.1; done
URL="$(sed -n 's/^listening on //p' "$OUT/serve.out" | head -1)"
uniagent-verl-dataset "$URL" "$OUT/train.parquet" --limit 448
uniagent-verl-dataset "$URL" "$OUT/val.parquet" --skip 448
kill "$SERVE_PID"; trap - EXIT

# The agent loop launches its own service per node from UNIAGENT_BIN + UNIAGENT_CONFIG (see
# examples/verl/agent_loop.yaml); Ray workers inherit these variables from this shell when Ray
# is started here (a fresh local cluster).
python -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=false \
    data.train_files="$OUT/train.parquet" \
    data.val_files="$OUT/val.parquet" \
    data.train_batch_size=32 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=true \
    data.return_raw_chat=true \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.use_kl_loss=false \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.calculate_log_probs=true \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.agent.default_agent_loop=uniagent \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$PWD/examples/verl/agent_loop.yaml" \
    actor_rollout_ref.rollout.agent.num_workers=4 \
    trainer.use_v1=true \
    trainer.n_gpus_per_node="$NGPUS" \
    trainer.nnodes=1 \
    trainer.logger='["console"]' \
    trainer.val_before_train=false \
    trainer.test_freq=10 \
    trainer.save_freq=-1 \
    trainer.total_epochs=1 \
    trainer.default_local_dir="$OUT/checkpoints" \
    "$@"
