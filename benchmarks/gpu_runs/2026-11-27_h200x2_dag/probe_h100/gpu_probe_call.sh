#!/bin/bash
# Session probe (2026-11-27): trainer kernels at batch 256, Inductor knobs, generative bf16 step.
. benchmarks/gpu_env.sh
T="--device cuda --tokens results/paper/tokens/wikitext2 --batch 256 --min-steps 200 --no-reference"
B=benchmarks/trainer_throughput.py
python $B $T --ours "" --max-seconds 90 --out $OUT/t_base.json >$OUT/t_base.txt 2>&1
python $B $T --ours cuda_graphs=false --profile --max-seconds 90 --out $OUT/t_prof.json >$OUT/t_prof.txt 2>&1
TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 python $B $T --ours "" --max-seconds 120 --out $OUT/t_cd.json >$OUT/t_cd.txt 2>&1
TORCHINDUCTOR_MAX_AUTOTUNE_GEMM=1 python $B $T --ours "" --max-seconds 150 --out $OUT/t_mag.json >$OUT/t_mag.txt 2>&1
python $B $T --ours "" --max-seconds 90 --out $OUT/t_base2.json >$OUT/t_base2.txt 2>&1
python benchmarks/gen_step.py --device cuda --batch 512 --steps 300 --bf16 --out $OUT/gen_bf16.json >$OUT/gen_bf16.txt 2>&1
grep -h "tokens/s\|done:\|Error\|error" $OUT/t_*.txt | tail -20
grep -v "bench:" $OUT/gen_bf16.txt | tail -12
