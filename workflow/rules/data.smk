# Data: the mirror (checked; with data.source auto built from the hub when absent), corpus
# splits, then token arrays.

# The files of a corpus's splits (prepare_corpus) and of its token arrays (tokenize).
CORPUS_FILES = ("train.txt", "valid.txt", "test.txt", "meta.json")
TOKEN_FILES = ("train.npy", "valid.npy", "test.npy", "tokenizer.json", "meta.json")


rule mirror:
    input:
        code=code("mirror"),
    output:
        res("data/mirror.json"),
    log:
        logfile("mirror"),
    priority: PRIORITY["data"]
    conda:
        "../envs/pillm.yaml"
    params:
        data=lambda w: as_json(config["data"]),
    shell:
        "python -m pillm mirror --params {params.data:q} --out {output} > {log} 2>&1"


rule prepare_corpus:
    input:
        code=code("prepare-corpus"),
    output:
        multiext(res("data/{corpus}/"), *CORPUS_FILES),
    log:
        logfile("prepare_corpus/{corpus}"),
    priority: PRIORITY["data"]
    conda:
        "../envs/pillm.yaml"
    params:
        data=lambda w: as_json(config["data"]),
        out_dir=subpath(output[0], parent=True),
    shell:
        "python -m pillm prepare-corpus --corpus {wildcards.corpus} --params {params.data:q}"
        " --out-dir {params.out_dir} > {log} 2>&1"


rule tokenize:
    input:
        corpus=multiext(res("data/{corpus}/"), *CORPUS_FILES),
        code=code("tokenize"),
    output:
        multiext(res("tokens/{corpus}/"), *TOKEN_FILES),
    log:
        logfile("tokenize/{corpus}"),
    benchmark:
        benchfile("tokenize/{corpus}")
    priority: PRIORITY["data"]
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=lambda w: as_json({key: config[key] for key in ("tokenizer", "data")}),
        corpus_dir=lambda w, input: parent(input.corpus[0]),
        out_dir=subpath(output[0], parent=True),
    shell:
        "python -m pillm tokenize --corpus-dir {params.corpus_dir} --params {params.cfg:q}"
        " --out-dir {params.out_dir} > {log} 2>&1"
