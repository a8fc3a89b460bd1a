#!/usr/bin/env bash
# A few GRPO steps of verl 0.9.1 with vLLM on the repository's tiny Qwen2, the rollouts run by
# `uniagent serve` (file-lookup, host sandboxes). For a GPU machine with verl's GPU stack
# (vLLM, flash-attn) in the active Python and `uniagent` built; not run in CI.
#   UNIAGENT_BIN=target/release/uniagent bash scripts/gpu/verl-e2e.sh
# Passes when verl finishes the steps; the rewards of a random tiny model are near zero, what is
# checked is that the loop runs: rollouts through the bridge, TransferQueue, the GRPO update.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${UNIAGENT_BIN:?set UNIAGENT_BIN to the uniagent binary}"
OUT="$(mktemp -d /tmp/uniagent-verl-e2e.XXXXXX)"
python -m pip install --no-deps -e python/uniagent-verl >/dev/null
# A complete Hugging Face directory: the tiny Qwen2 with the Qwen2.5 tokenizer it shares a
# vocabulary with.
MODEL="$OUT/tiny-qwen2"
mkdir -p "$MODEL"
for f in config.json generation_config.json model.safetensors; do
    ln -s "$PWD/crates/uniagent-train/tests/fixtures/tiny-qwen2/$f" "$MODEL/$f"
done
for f in tokenizer.json tokenizer_config.json chat_template.jinja; do
    ln -s "$PWD/crates/uniagent-core/tests/fixtures/tokenizers/qwen2.5/$f" "$MODEL/$f"
done
sed -e "s|\${MODEL_PATH}|$MODEL|" -e 's/count: 512/count: 64/' \
    -e 's/max_prompt_len: 1024/max_prompt_len: 1024/' -e 's/max_tokens: 256/max_tokens: 64/' \
    examples/verl/file_lookup.yaml > "$OUT/serve.yaml"
# The dataset, then training with the agent loop launching the service itself.
"$UNIAGENT_BIN" serve "$OUT/serve.yaml" --port 0 > "$OUT/serve.out" 2> "$OUT/serve.log" &
SERVE_PID=$!
for _ in $(seq 100); do grep -q '^listening on ' "$OUT/serve.out" 2>/dev/null && break; sleep 0.1; done
URL="$(sed -n 's/^listening on //p' "$OUT/serve.out" | head -1)"
uniagent-verl-dataset "$URL" "$OUT/train.parquet" --limit 56
uniagent-verl-dataset "$URL" "$OUT/val.parquet" --skip 56
kill "$SERVE_PID"
export UNIAGENT_BIN UNIAGENT_CONFIG="$OUT/serve.yaml" UNIAGENT_VERL_RUN_DIR="$OUT/run"
timeout 1800 python -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$OUT/train.parquet" \
    data.val_files="$OUT/val.parquet" \
    data.train_batch_size=4 \
    data.max_prompt_length=1024 \
    data.max_response_length=512 \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.actor.use_kl_loss=false \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.agent.default_agent_loop=uniagent \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$PWD/examples/verl/agent_loop.yaml" \
    actor_rollout_ref.rollout.agent.num_workers=2 \
    trainer.use_v1=true \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.logger='["console"]' \
    trainer.val_before_train=false \
    trainer.test_freq=-1 \
    trainer.save_freq=-1 \
    trainer.total_training_steps=3 \
    trainer.default_local_dir="$OUT/checkpoints" 2>&1 | tee "$OUT/train.log"
grep -q "step:3" "$OUT/train.log"
echo "verl-e2e: 3 GRPO steps done ($OUT)"
