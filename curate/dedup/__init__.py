"""Deduplication and decontamination (`curate dedup`, pipeline step `dedup`).

tokens.py   tree-sitter tokens (the definition) and a lexer that reproduces them ~40x faster
minhash.py  token ids, shingles and datasketch-compatible MinHash signatures with numpy, in
            parallel (Signer)
index.py    LSH banding in numpy for one table; the persistent MinHashLSH index in Redis
evalsets.py evaluation sets (KernelBench folders, tables, @kernelbench)
core.py     clusters, representatives, decontamination: `dedup(rows, ...)`
step.py     the pipeline step; cli.py the command
"""
