#!/usr/bin/env bash
# STARS on Ouro-1.4B with NuminaMath-1.5, then GSM8K and MATH-500 at 4 and 8 loops: the STARS paper's Ouro experiment
# with the reference code's recipe (preset reference_ouro). Needs 8 GPUs with bf16 and the network (the model, the
# data and the lm-eval tasks come from the Hub); run from the repository root with equilibria[eval] installed.
# The paper's numbers, the target (GSM8K, 4 -> 8 loops): SFT 70.46% -> 52.97%, STARS 74.18% -> 65.55%.
set -euo pipefail
OUT=${OUT:-ouro-1.4b-stars-numina}

# 1. fine-tune (examples/stars_ouro_math.yaml holds every setting; flags after it override)
accelerate launch --config_file examples/stars_ouro_math_accelerate.yaml -m equilibria.cli train \
    examples/stars_ouro_math.yaml --output_dir "$OUT"

# 2. evaluate 0-shot with the chat template and 2048 new tokens, as the reference's run_eval.sh does, at 4 and 8
#    loops (total_ut_steps: the loop count, passed to from_pretrained; the saved folder carries its modeling code).
#    Unlike run_eval.sh, no system instruction is given: add lm_eval's --system_instruction "..." with its text to
#    match it; scores with and without one are not comparable.
for LOOPS in 4 8; do
    lm_eval --model hf \
        --model_args "pretrained=$OUT,trust_remote_code=True,dtype=bfloat16,total_ut_steps=$LOOPS" \
        --tasks gsm8k,minerva_math500 --num_fewshot 0 --apply_chat_template \
        --gen_kwargs max_gen_toks=2048 --batch_size 8 --output_path "$OUT/lm_eval_loops$LOOPS"
done
