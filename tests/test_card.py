"""`curate card`: front matter, body facts, plots, hand-written sections, validation split."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from curate.card import hand_written, is_current, render_card
from curate.card.cli import card as card_cmd
from curate.hub.shards import list_shards, resplit_folder, split_by_cluster, write_shards
from curate.record import content_hash
from curate.schema import new_record
from curate.tableio import read_rows, write_rows

PIPELINE = """\
name: default
device: cuda
threshold: 2.0
out: build
source:
  ingest:
    paths:
    - '@examples'
steps:
- synth-inductor: {}
- dedup:
    jaccard: 0.8
    against:
    - '@kernelbench'
- verify: {}
- keep: {}
"""

REF = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * {k}

def get_inputs():
    return [torch.randn(4096, {n})]

def get_init_inputs():
    return []
"""

TRITON = """import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_scale_{k}(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * {k}, mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        relu_scale_{k}[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
"""

CUDA = """import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = '''
__global__ void relu_scale_{k}(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f) * {k};
}}
'''

class ModelNew(nn.Module):
    def forward(self, x):
        return x
"""


def _pairs(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        backend = "triton" if i % 3 else "cuda"
        source = ["kernelbench", "inductor", "llm"][i % 3] if i % 7 else "scrape"
        ref = REF.format(k=i + 2, n=64 * (i + 1))
        kernel = (TRITON if backend == "triton" else CUDA).format(k=i + 2)
        sp = 2.0 * (1.1 + rng.lognormvariate(0.3, 0.6))
        ref_ms = rng.uniform(0.05, 3.0)
        rows.append(new_record(
            id=content_hash(ref, kernel), pytorch_code=ref, kernel_code=kernel, backend=backend,
            source=source, entry_point="Model",
            repo=None if source in ("inductor", "llm") else f"github.com/example/kb{i % 4}",
            path=f"level1/{i}_relu.py", license=[None, "MIT", "Apache-2.0", "MIT"][i % 4],
            generator="torch-2.11.0/inductor" if source == "inductor" else "qwen-coder-32b",
            status="verified", correct=True, speedup=sp, speedup_ci_low=sp * 0.93,
            speedup_ci_high=sp * 1.06, ref_ms=ref_ms, kernel_ms=ref_ms / sp,
            max_abs_err=rng.uniform(0, 1e-5), max_rel_err=rng.uniform(0, 1e-4),
            gpu="NVIDIA H200", torch_version="2.11.0", triton_version="3.6.0",
            cuda_version="12.8", cluster_id=f"c{i // 3:03d}",
            reasons=["half_precision"] if i % 10 == 0 else []))
    return rows


def _infill(pairs: list[dict]) -> list[dict]:
    out = []
    for r in pairs:
        code = r["kernel_code"]
        start = code.index("@triton.jit") if "@triton.jit" in code else code.index("__global__")
        end = code.index("class ModelNew")
        out.append(dict(r, prefix=code[:start], core=code[start:end], suffix=code[end:],
                        core_kind="triton_kernel" if r["backend"] == "triton" else "cuda_kernel",
                        core_name=f"relu_scale_{r['id'][:4]}"))
    return out


def make_build(root: Path, *, n: int = 30, decontam: str = "skipped", infill: bool = True) -> Path:
    """A build directory as `curate build` + `curate split-infill` leave it (invented rows)."""
    build = root / "build"
    build.mkdir(parents=True)
    pairs = _pairs(n)
    write_shards(None, build / "data", rows=pairs)
    if infill:
        write_shards(None, build / "infill", rows=_infill(pairs))
        (build / "infill" / "config.json").write_text(json.dumps({
            "curate_version": "0.1.0", "config_name": "infill", "granularity": "kernel",
            "multi": "per-kernel", "fim_format": "none", "pairs_in": n, "pairs_split": n,
            "pairs_rejected": 0, "rows": n, "core_kinds": {}, "reasons": {},
            "solvability": {"device": "cpu", "checked": 8, "solvable": 7, "full": {},
                            "empty": {}, "rows": []},
            "shards": ["infill/train-00000-of-00001.parquet"]}))
    rejected = []
    reasons = {"ingest": Counter({"no_get_inputs": 2}),
               "dedup": Counter({"near_duplicate": 6}),
               "keep": Counter({"status:incorrect": 5, "below_threshold:2": 9,
                                "status:compile_error": 3, "status:deceptive": 2,
                                "status:timeout": 1})}
    if decontam == "done":
        reasons["dedup"]["contaminated:kernelbench"] = 4
    for stage, c in reasons.items():
        for reason, k in c.items():
            for j in range(k):
                ref = REF.format(k=900 + j, n=len(rejected))
                status, why = {"status:deceptive": ("deceptive", ["input_mutated"]),
                               "status:incorrect": ("incorrect", ["mismatch"]),
                               "status:compile_error": ("compile_error", ["compile_error"]),
                               "status:timeout": ("timeout", ["timeout"])}.get(
                    reason, ("verified" if stage == "keep" else None, []))
                rejected.append(new_record(id=content_hash(ref), pytorch_code=ref, stage=stage,
                                           reasons=[*why, reason], status=status))
    write_rows(build / "rejected.parquet", rejected)
    dropped = {s: sum(c.values()) for s, c in reasons.items()}
    dedup_extra = {}
    if decontam == "skipped":  # what curate.dedup.step reports when the eval set is missing
        dedup_extra = {"extra": {"decontaminated": False, "decontaminated_against": {},
                                 "evalset_problems": 0, "evalsets_missing": ["@kernelbench"],
                                 "dropped_contaminated": 0, "clusters": 44}}
    elif decontam == "done":
        dedup_extra = {"extra": {"decontaminated": True,
                                 "decontaminated_against": {"@kernelbench": "/data/kernelbench"},
                                 "evalset_problems": 250, "evalsets_missing": [],
                                 "dropped_contaminated": 4, "clusters": 44}}
    elif decontam == "legacy-skipped":  # a build with no structured report, only a remark
        dedup_extra = {"decontamination": "skipped: evaluation set @kernelbench not found"}
    kept_in = n + dropped["keep"]          # keep's input = verify's input and output
    dedup_in = kept_in + dropped["dedup"]   # one candidate per reference
    stages = [
        {"name": "ingest", "rows_in": dedup_in + dropped["ingest"], "rows_out": dedup_in,
         "dropped": dropped["ingest"], "seconds": 0.4, "reasons": dict(reasons["ingest"]),
         "skipped": False},
        {"name": "synth-inductor", "rows_in": dedup_in, "rows_out": dedup_in, "dropped": 0,
         "seconds": 61.0, "reasons": {}, "skipped": False},
        {"name": "dedup", "rows_in": dedup_in, "rows_out": kept_in, "seconds": 1.3,
         "dropped": dropped["dedup"], "reasons": dict(reasons["dedup"]), "skipped": False,
         **dedup_extra},
        {"name": "verify", "rows_in": kept_in, "rows_out": kept_in, "dropped": 0,
         "seconds": 300.0, "reasons": {}, "skipped": False},
        {"name": "keep", "rows_in": kept_in, "rows_out": n, "dropped": dropped["keep"],
         "seconds": 0.1, "reasons": dict(reasons["keep"]), "skipped": False},
    ]
    stats = {"curate_version": "0.1.0", "pipeline": "default", "device": "cuda",
             "threshold": 2.0, "python": "3.12.3", "seconds": 363.0, "kept": n,
             "rejected": len(rejected), "stages": stages,
             "shards": ["data/train-00000-of-00001.parquet"]}
    (build / "stats.json").write_text(json.dumps(stats, indent=2))
    (build / "pipeline.yaml").write_text(PIPELINE)
    return build


def _split_card(text: str) -> tuple[dict, str]:
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


@pytest.fixture
def build(tmp_path):
    return make_build(tmp_path)


def test_front_matter_has_hub_metadata(build):
    c = render_card(build, repo_id="org/cuke")
    meta, body = _split_card(c.path.read_text())
    assert meta["pretty_name"] == "cuke"
    assert meta["size_categories"] == ["n<1K"]
    assert meta["task_categories"] == ["text-generation"]
    assert {"triton", "cuda", "code"} <= set(meta["tags"])
    # mixed licenses, stated honestly: MIT, Apache-2.0 and rows with none
    assert set(meta["license"]) == {"mit", "apache-2.0", "unknown"}
    configs = {c["config_name"]: c for c in meta["configs"]}
    assert configs["default"]["default"] is True
    assert configs["default"]["data_files"] == [{"split": "train", "path": "data/train-*"}]
    assert configs["infill"]["data_files"] == [{"split": "train", "path": "infill/train-*"}]
    infos = {i["config_name"]: i for i in meta["dataset_info"]}
    assert infos["default"]["splits"] == [{"name": "train", "num_bytes": pytest.approx(
        infos["default"]["splits"][0]["num_bytes"]), "num_examples": 30}]
    names = [f["name"] for f in infos["default"]["features"]]
    assert names == pq.read_schema(next(iter(list_shards(build / "data").values()))[0]).names
    assert {"name": "reasons", "sequence": "string"} in infos["default"]["features"]
    assert {"name": "speedup", "dtype": "float64"} in infos["default"]["features"]
    assert infos["infill"]["splits"][0]["num_examples"] == 30
    assert 'load_dataset("org/cuke", "infill")' in body


def test_card_loads_with_huggingface_hub_and_datasets_reads_its_metadata(build):
    from huggingface_hub import DatasetCard, DatasetCardData
    c = render_card(build, repo_id="org/cuke")
    hub_card = DatasetCard.load(c.path)
    assert isinstance(hub_card.data, DatasetCardData)
    assert hub_card.data.pretty_name == "cuke"
    assert "mit" in hub_card.data.license
    datasets = pytest.importorskip("datasets", reason="needs the `datasets` package (test extra)")
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs
    configs = MetadataConfigs.from_dataset_card_data(hub_card.data)
    assert set(configs) == {"default", "infill"}
    infos = DatasetInfosDict.from_dataset_card_data(hub_card.data)
    assert infos["default"].splits["train"].num_examples == 30
    feats = infos["default"].features
    assert isinstance(feats["reasons"], datasets.List)
    # the card's features are exactly what the shards hold (load_dataset casts to them)
    shard = list_shards(build / "data")["train"][0]
    assert feats.arrow_schema.names == pq.read_schema(shard).names


def test_body_states_counts_verification_and_reproduction(build):
    text = render_card(build).path.read_text()
    _, body = _split_card(text)
    stats = json.loads((build / "stats.json").read_text())
    assert "**30 pairs**" in body
    for s in stats["stages"]:  # counts per stage
        assert f"| {s['name']} | {s['rows_in']} | {s['rows_out']} | {s['dropped']} |" in body
    assert "| keep | `below_threshold:2` | 9 |" in body
    assert "NVIDIA H200 (30)" in body
    assert "torch 2.11.0 (30)" in body and "triton 3.6.0 (30)" in body and "CUDA 12.8 (30)" in body
    assert "`input_mutated`" in body
    assert "`mismatch`: 5 rows (incorrect)" in body  # what the checks caught (rejected.parquet)
    assert "| `half_precision` | 3 |" in body  # warnings carried by kept rows
    assert "`input_mutated`: 2 rows (deceptive)" in body
    assert "Empty in every row of this config" in body and "`dup_of`" in body
    assert "| `dup_of` |" not in body
    assert "float32 0.01 / 0.01 / 0.001" in body  # the verify stage's tolerances
    assert "`trials=3`" in body
    assert "curate build --pipeline pipeline.yaml --threshold 2.0 --device cuda" in body
    assert PIPELINE.strip() in body
    assert "mixed-license" in body
    assert "Solvability check on 8 sampled rows (cpu): 7 solvable" in body
    assert "no license recorded" in body
    for png in ("assets/speedup_histogram.png", "assets/rejections.png"):
        assert f"]({png})" in body
        data = (build / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


@pytest.mark.parametrize("decontam", ["skipped", "absent", "legacy-skipped"])
def test_card_says_no_decontamination_unless_the_build_says_it_happened(tmp_path, decontam):
    build = make_build(tmp_path, decontam=decontam)
    body = _split_card(render_card(build).path.read_text())[1]
    assert "**No decontamination was done for this build.**" in body
    assert "asked for decontamination against @kernelbench" in body
    if decontam != "absent":
        assert "@kernelbench not found" in body
    assert "**none was done**" in body
    assert "No decontamination against evaluation sets" in body  # and among the limitations


def test_legacy_positive_mention_counts_as_done(tmp_path):
    from curate.card.facts import decontamination
    stats = {"stages": [{"name": "dedup", "reasons": {"contaminated:kb/1_relu": 2},
                         "decontamination": {"against": ["@kernelbench"]}}]}
    steps = [("dedup", {"against": ["@kernelbench"]})]
    d = decontamination(stats, {}, steps)
    assert d["done"] and d["dropped"] == 2 and d["against"] == ["@kernelbench"]
    assert not decontamination({"stages": []}, {}, steps)["done"]


def test_card_states_decontamination_when_recorded(tmp_path):
    build = make_build(tmp_path, decontam="done")
    body = _split_card(render_card(build).path.read_text())[1]
    assert "No decontamination" not in body
    assert "checked against the evaluation set(s) @kernelbench (250 problems)" in body
    assert "4 rows that matched an evaluation problem were dropped" in body
    assert "| decontamination | against @kernelbench |" in body


def test_hand_written_sections_survive_a_rerender(build):
    c = render_card(build)
    text = c.path.read_text()
    text = text.replace("_Add the intended use, contact and citation here; this section is kept "
                        "when the card is rendered again._",
                        "Intended for SFT of kernel models.\nContact: team@example.org")
    text = text.replace("<!-- curate:begin summary -->\n",
                        "<!-- curate:begin summary -->\nA hand-written summary.\n")
    c.path.write_text(text)
    again = render_card(build, repo_id="org/cuke")
    assert sorted(again.kept_sections) == ["limitations", "notes", "summary"]
    new = again.path.read_text()
    assert "Intended for SFT of kernel models.\nContact: team@example.org\n" in new
    assert "A hand-written summary." in new
    assert hand_written(new)["notes"] == "Intended for SFT of kernel models.\nContact: team@example.org\n"
    assert 'load_dataset("org/cuke")' in new  # the generated part was regenerated


def test_a_readme_curate_did_not_write_is_saved_first(build):
    (build / "README.md").write_text("# my own notes\n")
    c = render_card(build)
    assert c.backup == build / "README.md.bak"
    assert c.backup.read_text() == "# my own notes\n"
    assert render_card(build).backup is None  # the second time it is curate's own card


def test_a_given_name_sticks_across_renders(build):
    render_card(build, pretty_name="CUKE: verified kernels, v1.")
    c = render_card(build, repo_id="org/cuke")  # e.g. `curate push` re-rendering a stale card
    meta, _ = _split_card(c.path.read_text())
    assert meta["pretty_name"] == "CUKE: verified kernels, v1."
    c = render_card(build, repo_id="org/cuke", pretty_name="other")
    assert _split_card(c.path.read_text())[0]["pretty_name"] == "other"


def test_fingerprint_tells_a_stale_card(build):
    render_card(build, repo_id="org/cuke")
    assert is_current(build, "org/cuke")
    assert not is_current(build, "org/other")
    pairs = read_rows(list_shards(build / "data")["train"][0])
    write_shards(None, build / "data", rows=pairs[:-1])
    assert not is_current(build, "org/cuke")


def test_split_by_cluster_keeps_clusters_whole_and_is_deterministic():
    keys = [f"c{i // 3}" for i in range(300)] + [f"solo{i}" for i in range(100)]
    val = split_by_cluster(keys, 0.1)
    assert val == split_by_cluster(list(reversed(keys)), 0.1)
    n_val = sum(k in val for k in keys)
    assert 0.08 * len(keys) <= n_val <= 0.1 * len(keys)
    assert split_by_cluster(keys, 0.0) == set()
    assert split_by_cluster(["a", "a"], 0.5) == set()  # one cluster: train keeps it
    with pytest.raises(ValueError):
        split_by_cluster(keys, 1.0)


def test_val_fraction_splits_data_and_infill_by_cluster(build):
    res = CliRunner().invoke(card_cmd, [str(build), "--val-fraction", "0.2", "--repo", "org/c"])
    assert res.exit_code == 0, res.output
    data = list_shards(build / "data")
    infill = list_shards(build / "infill")
    assert set(data) == set(infill) == {"train", "validation"}
    tr = [r for p in data["train"] for r in read_rows(p)]
    va = [r for p in data["validation"] for r in read_rows(p)]
    assert len(tr) + len(va) == 30 and 3 <= len(va) <= 6
    assert not {r["cluster_id"] for r in tr} & {r["cluster_id"] for r in va}
    va_ids = {r["id"] for r in va}
    infill_va = {r["id"] for p in infill["validation"] for r in read_rows(p)}
    assert infill_va == va_ids
    meta, body = _split_card((build / "README.md").read_text())
    default = next(c for c in meta["configs"] if c["config_name"] == "default")
    assert [d["split"] for d in default["data_files"]] == ["train", "validation"]
    assert "never straddle train and validation" in body
    assert "--val-fraction 0.2 --seed curate" in body  # the recipe names the split
    assert json.loads((build / "splits.json").read_text())["val_fraction"] == 0.2
    # 0 merges everything back into train
    out, _ = resplit_folder(build / "data", 0.0)
    assert set(out) == {"train"} and sum(len(read_rows(p)) for p in out["train"]) == 30


def test_write_shards_bounds_size_and_clears_old_splits(tmp_path):
    rows = _pairs(40)
    dest = tmp_path / "data"
    (dest).mkdir()
    (dest / "validation-00000-of-00001.parquet").write_bytes(b"stale")
    paths = write_shards(None, dest, rows=rows, max_bytes=1)  # the bound splits every batch
    assert [p.name for p in paths] == ["train-00000-of-00001.parquet"]
    assert list_shards(dest) == {"train": paths}
    from curate.hub.shards import write_splits
    out = write_splits({"train": [rows[:20], rows[20:]]}, dest, max_bytes=1)
    assert [p.name for p in out["train"]] == ["train-00000-of-00002.parquet",
                                              "train-00001-of-00002.parquet"]
    assert sum(len(read_rows(p)) for p in out["train"]) == 40
    assert pq.read_metadata(out["train"][0]).row_group(0).column(0).compression == "ZSTD"


def test_card_cli_needs_a_build(tmp_path):
    res = CliRunner().invoke(card_cmd, [str(tmp_path / "nothing")])
    assert res.exit_code != 0
    assert "curate build" in str(res.exception)


def test_card_help_has_an_example():
    res = CliRunner().invoke(card_cmd, ["--help"])
    assert res.exit_code == 0 and "Example:" in res.output and "curate card build" in res.output
