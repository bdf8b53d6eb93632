#!/bin/bash
# Session 9 call A (one H100): the fused head's tiles after the exp2 change (every setting
# here builds for sm_90 without spills; 'waves=1' is the default again, a repeat), the
# batch-256 step's profile with compiling and autotuning outside the window, and Inductor's
# generated code of that step (where do the 18 aten::sum calls a step come from).
. benchmarks/gpu_env.sh
H="--only fused --rows 32768 --rows 4096 --iters 50"
B=(--blocks "" --blocks "stages=4" --blocks "dx_m=64,dx_warps=4,stages=4"
   --blocks "dx_n=32,stages=4" --blocks "dw_m=32,stages=4" --blocks "dw_n=64,dw_warps=4,stages=4"
   --blocks "waves=1")
timeout 200 python benchmarks/output_layer_speed.py $H "${B[@]}" --out $OUT/tiles.json \
  >$OUT/tiles.txt 2>&1
grep -h "^| " $OUT/tiles.txt | cut -c1-120
T="--device cuda --tokens results/paper/tokens/wikitext2 --max-seconds 170"
timeout 180 python benchmarks/trainer_throughput.py $T --batch 256 --min-steps 60 --no-reference \
  --ours cuda_graphs=false,deterministic=false --profile 70 --profile-shapes \
  >$OUT/profile_shapes.txt 2>&1
tail -3 $OUT/profile_shapes.txt | cut -c1-150
TORCH_LOGS=output_code timeout 120 python benchmarks/trainer_throughput.py $T --batch 256 \
  --steps 12 --no-reference --ours deterministic=false >$OUT/output_code.txt 2>&1
grep -o "aten\.[a-z_0-9.]*\|extern_kernels\.[a-z_0-9]*" $OUT/output_code.txt | sort | uniq -c \
  | sort -rn | head -40 | tee $OUT/aten_calls.txt
grep -n -B4 -A1 "aten\.sum" $OUT/output_code.txt | head -150 >$OUT/sum_context.txt
gzip -9 $OUT/output_code.txt
