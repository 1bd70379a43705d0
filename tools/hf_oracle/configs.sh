# tools/hf_oracle/configs.sh: the synthesized models of the HF cross-check (sourced by device_run.sh and
# kept in sync with suites/hf/cases.h, which re-synthesizes them and checks the sha256 recorded in the HDF5).
# NAME | mlaconf synth options (after --seed S --out F) | prompt tokens | greedy steps
HF_CASES=(
  "glm5_layer|--preset glm5 --seed 501 --layers 1 --dense-lead 1 --vocab 1024 --top-k 8|32|3"
  "glm_groups_shared|--seed 502 --layers 4 --dense-lead 1 --n-embd 384 --n-head 6 --q-lora-rank 128 --kv-lora-rank 192 --qk-nope 64 --qk-rope 32 --v-head 48 --indexer-heads 4 --indexer-dim 64 --top-k 10 --experts 16 --experts-used 4 --expert-groups 4 --groups-used 2 --shared-experts 1 --ff-exp 96 --ff 512 --vocab 768 --indexer-types FFSS|48|4"
  "glm_groups|--seed 502 --layers 4 --dense-lead 1 --n-embd 384 --n-head 6 --q-lora-rank 128 --kv-lora-rank 192 --qk-nope 64 --qk-rope 32 --v-head 48 --indexer-heads 4 --indexer-dim 64 --top-k 10 --experts 16 --experts-used 4 --expert-groups 4 --groups-used 2 --shared-experts 1 --ff-exp 96 --ff 512 --vocab 768|48|4"
  "deepseek32|--arch deepseek32 --seed 503 --layers 3 --dense-lead 1 --n-embd 320 --n-head 5 --q-lora-rank 96 --kv-lora-rank 128 --qk-nope 48 --qk-rope 32 --v-head 40 --indexer-heads 4 --indexer-dim 64 --top-k 12 --experts 16 --experts-used 4 --expert-groups 8 --groups-used 4 --ff-exp 64 --ff 384 --vocab 640|48|4"
)
