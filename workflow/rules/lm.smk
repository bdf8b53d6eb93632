# Language models: one job per (variant, seed); a GPU rule that also runs on CPU.


rule train_lm:
    input:
        tokens=multiext(
            f"results/tokens/{CORPUS}/",
            "train.npy",
            "valid.npy",
            "test.npy",
            "meta.json",
        ),
        code=src("model", "train", "evaluate"),
    output:
        metrics="results/lm/{variant}/seed{seed}/metrics.json",
        curve="results/lm/{variant}/seed{seed}/curve.parquet",
        checkpoint="results/lm/{variant}/seed{seed}/model.pt",
    log:
        "results/logs/train_lm/{variant}/seed{seed}.log",
    benchmark:
        "results/benchmarks/train_lm/{variant}/seed{seed}.tsv"
    conda:
        "../envs/pillm.yaml"
    threads: workflow.cores
    resources:
        gpu=1,
    params:
        cfg=lambda w: as_json({"model": config["model"], "train": config["train"]}),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dir=subpath(output.metrics, parent=True),
        device=config["device"],
    shell:
        "python -m pillm train-lm --variant {wildcards.variant} --seed {wildcards.seed}"
        " --tokens-dir {params.tokens_dir} --params {params.cfg:q} --device {params.device}"
        " --out-dir {params.out_dir} > {log} 2>&1"
