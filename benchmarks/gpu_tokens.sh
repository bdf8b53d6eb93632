#!/usr/bin/env bash
# The paper config's WikiText-2 tokens on a GPU host without Snakemake (sourced after gpu_env.sh):
# results/paper/tokens/wikitext2 from the carried mirror copy in .gpu/data.
python - <<'PY'
import json, subprocess, yaml
c = yaml.safe_load(open("config/config.yaml"))
data = {**c["data"], "local_dir": ".gpu/data"}
run = lambda *a: subprocess.run(["python", "-m", "pillm", *a], check=True)
run("prepare-corpus", "--corpus", data["corpus"], "--params", json.dumps(data),
    "--out-dir", "results/paper/data/wikitext2")
run("tokenize", "--corpus-dir", "results/paper/data/wikitext2", "--params",
    json.dumps({"data": data, "tokenizer": c["tokenizer"]}), "--out-dir", "results/paper/tokens/wikitext2")
PY
