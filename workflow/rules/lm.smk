# Language models: one job per variant (all its seeds in one process), gradient-trained and/or
# closed-form solved.
# A GPU rule that also runs on CPU (device: auto).


# One job per variant trains/solves all its seeds in one process: a process per run paid ~20 s
# of start-up and compile-cache loading for ~1 s of training (benchmarks/job_overhead.py).
rule run_lm:
    input:
        unpack(lm_run_inputs),
        tokens=multiext(
            res(f"tokens/{CORPUS}/"),
            "train.npy",
            "valid.npy",
            "test.npy",
            "meta.json",
        ),
        code=code("run-lm"),
    output:
        metrics=expand(res("lm/{{variant}}/seed{seed}/metrics.json"), seed=SEEDS),
        curve=expand(res("lm/{{variant}}/seed{seed}/curve.parquet"), seed=SEEDS),
        solve=expand(res("lm/{{variant}}/seed{seed}/solve.parquet"), seed=SEEDS),
        checkpoint=expand(res("lm/{{variant}}/seed{seed}/model.pt"), seed=SEEDS),
    log:
        logfile("run_lm/{variant}"),
    benchmark:
        benchfile("run_lm/{variant}")
    priority: lm_priority
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=lambda w: gpu_mem(
            "run_lm_fgrad" if plan.VARIANTS[w.variant].target == "fgrad" else "run_lm"
        ),
    params:
        cfg=lambda w: as_json(plan.lm_params(config, w.variant)),
        deps=lambda w: " ".join(
            f"{d}={res(f'lm/{d}')}" for d in dependencies(w.variant)
        ),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dirs=lambda w, output: " ".join(parent(m) for m in output.metrics),
        seeds=" ".join(map(str, SEEDS)),
        device=DEVICE,
    shell:
        "PILLM_GPU_MEM_MB={resources.gpu_mem_mb}"
        " python -m pillm run-lm --variant {wildcards.variant} --seeds {params.seeds}"
        " --tokens-dir {params.tokens_dir} --deps {params.deps} --params {params.cfg:q}"
        " --device {params.device} --out-dirs {params.out_dirs} > {log} 2>&1"


# One job per variant evaluates all its seeds: start-up, not evaluation, dominated per-run jobs.
rule lm_extras:
    input:
        metrics=expand(res("lm/{{variant}}/seed{seed}/metrics.json"), seed=SEEDS),
        checkpoints=expand(res("lm/{{variant}}/seed{seed}/model.pt"), seed=SEEDS),
        tokens=res(f"tokens/{CORPUS}/tokenizer.json"),
        code=code("lm-extras"),
    output:
        extras=expand(res("lm/{{variant}}/seed{seed}/extras.json"), seed=SEEDS),
        samples=expand(res("lm/{{variant}}/seed{seed}/samples.json"), seed=SEEDS),
    log:
        logfile("lm_extras/{variant}"),
    benchmark:
        benchfile("lm_extras/{variant}")
    priority: PRIORITY["lm_extras"]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("lm_extras"),
    params:
        cfg=as_json(
            {
                "data": config["data"],
                "lambada": config["lambada"],
                "samples": config["samples"],
            }
        ),
        run_dirs=lambda w, input: " ".join(parent(m) for m in input.metrics),
        tokens_dir=lambda w, input: parent(input.tokens),
        device=DEVICE,
    shell:
        "PILLM_GPU_MEM_MB={resources.gpu_mem_mb}"
        " python -m pillm lm-extras --run-dirs {params.run_dirs} --tokens-dir {params.tokens_dir}"
        " --params {params.cfg:q} --device {params.device} > {log} 2>&1"
