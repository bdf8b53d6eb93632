# Language models: one job per (variant, seed), gradient-trained and/or closed-form solved.
# A GPU rule that also runs on CPU (device: auto).


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
        metrics=res("lm/{variant}/seed{seed}/metrics.json"),
        curve=res("lm/{variant}/seed{seed}/curve.parquet"),
        solve=res("lm/{variant}/seed{seed}/solve.parquet"),
        checkpoint=res("lm/{variant}/seed{seed}/model.pt"),
    log:
        logfile("run_lm/{variant}/seed{seed}"),
    benchmark:
        benchfile("run_lm/{variant}/seed{seed}")
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
    params:
        cfg=lambda w: as_json(plan.lm_params(config, w.variant)),
        deps=lambda w: " ".join(
            f"{d}={res(f'lm/{d}/seed{w.seed}')}" for d in dependencies(w.variant)
        ),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dir=subpath(output.metrics, parent=True),
        device=DEVICE,
    shell:
        "python -m pillm run-lm --variant {wildcards.variant} --seed {wildcards.seed}"
        " --tokens-dir {params.tokens_dir} --deps {params.deps} --params {params.cfg:q}"
        " --device {params.device} --out-dir {params.out_dir} > {log} 2>&1"


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
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
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
        "python -m pillm lm-extras --run-dirs {params.run_dirs} --tokens-dir {params.tokens_dir}"
        " --params {params.cfg:q} --device {params.device} > {log} 2>&1"
