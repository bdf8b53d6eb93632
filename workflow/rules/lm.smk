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
        code=src(
            "models/gpt",
            "lm/train",
            "core/runtime",
            "lm/train_step",
            "lm/linear_ce",
            "models/evaluate",
            "lm/pil",
            "core/ridge",
            "models/checkpoint",
            "lm/run",
            "plan",
        ),
    output:
        metrics=res("lm/{variant}/seed{seed}/metrics.json"),
        curve=res("lm/{variant}/seed{seed}/curve.parquet"),
        solve=res("lm/{variant}/seed{seed}/solve.parquet"),
        checkpoint=res("lm/{variant}/seed{seed}/model.pt"),
    log:
        res("logs/run_lm/{variant}/seed{seed}.log"),
    benchmark:
        res("benchmarks/run_lm/{variant}/seed{seed}.tsv")
    conda:
        "../envs/pillm.yaml"
    threads: min(4, workflow.cores)
    resources:
        gpu=1,
    params:
        cfg=lambda w: as_json(lm_params(w.variant)),
        deps=lambda w: " ".join(
            f"{d}={res(f'lm/{d}/seed{w.seed}')}" for d in dependencies(w.variant)
        ),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dir=subpath(output.metrics, parent=True),
        device=config["device"],
    shell:
        "python -m pillm run-lm --variant {wildcards.variant} --seed {wildcards.seed}"
        " --tokens-dir {params.tokens_dir} --deps {params.deps} --params {params.cfg:q}"
        " --device {params.device} --out-dir {params.out_dir} > {log} 2>&1"


rule lm_extras:
    input:
        metrics=res("lm/{variant}/seed{seed}/metrics.json"),
        checkpoint=res("lm/{variant}/seed{seed}/model.pt"),
        tokens=res(f"tokens/{CORPUS}/tokenizer.json"),
        code=src(
            "data/lambada",
            "lm/run",
            "models/checkpoint",
            "models/gpt",
            "lm/pil",
            "data/sources",
        ),
    output:
        extras=res("lm/{variant}/seed{seed}/extras.json"),
        samples=res("lm/{variant}/seed{seed}/samples.json"),
    log:
        res("logs/lm_extras/{variant}/seed{seed}.log"),
    conda:
        "../envs/pillm.yaml"
    threads: min(4, workflow.cores)
    resources:
        gpu=1,
    params:
        cfg=as_json(
            {
                "data": config["data"],
                "lambada": config["lambada"],
                "samples": config["samples"],
            }
        ),
        run_dir=lambda w, input: parent(input.metrics),
        tokens_dir=lambda w, input: parent(input.tokens),
        device=config["device"],
    shell:
        "python -m pillm lm-extras --run-dir {params.run_dir} --tokens-dir {params.tokens_dir}"
        " --params {params.cfg:q} --device {params.device} > {log} 2>&1"
