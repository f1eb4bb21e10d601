"""The card of a CPU build tells the truth: the processor, the compiler flags, C++ not GPU,
every reason on kept rows explained, warnings apart from failures, no file it does not ship,
a real title, plots whose bars add up and whose labels are whole."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.card import render_card
from curate.card import reasons as R
from curate.card.facts import gather
from curate.card.machine import record_machine
from curate.hub.push import publish_files
from curate.hub.shards import list_shards, write_shards
from curate.tableio import read_rows

sys.path.insert(0, str(Path(__file__).parent))
from test_card import _split_card, make_build  # noqa: E402

BUILD_LINE = ("_BUILD = {'compiler': 'g++', 'defines': ['CPU_CAPABILITY_AVX2', 'NDEBUG'], "
              "'flags': ['-O3', '-march=native', '-shared', '-fPIC', '-fopenmp', '-mavx2', "
              "'-mfma'], 'libs': ['torch', 'torch_cpu', 'gomp']}")
KEPT_REASONS = ["builds_with_subprocess", "ctypes_loader", "extern_kernels",
                "torch_ops_in_forward", "extern_kernels:convolution"]
MACHINE = {"processor": "AMD EPYC 7B13 64-Core Processor", "cores": 2, "arch": "x86_64",
           "system": "Linux"}


def make_cpu_build(root: Path) -> Path:
    """make_build's build as a CPU build leaves it: C++ programs (with curate's `_BUILD` line),
    no GPU, verify's warnings on the kept rows, the build machine recorded."""
    build = make_build(root, infill=False)
    rows = read_rows(list_shards(build / "data")["train"][0])
    for i, r in enumerate(rows):
        r.update(backend="cpp", gpu=None, cuda_version=None, triton_version=None,
                 kernel_code=f"import ctypes\n{BUILD_LINE}\n_lib = None\n# kernel {i}\n",
                 reasons=KEPT_REASONS[: 2 + i % 4])
    write_shards(None, build / "data", rows=rows)
    stats = json.loads((build / "stats.json").read_text())
    stats["device"] = "cpu"
    (build / "stats.json").write_text(json.dumps(stats))
    (build / "pipeline.yaml").write_text((build / "pipeline.yaml").read_text()
                                         .replace("device: cuda", "device: cpu"))
    digest = __import__("hashlib").sha256((build / "stats.json").read_bytes()).hexdigest()
    (build / "machine.json").write_text(json.dumps({**MACHINE, "stats_sha256": digest}))
    return build


@pytest.fixture
def cpu_build(tmp_path):
    return make_cpu_build(tmp_path)


def test_cpu_card_names_the_processor_and_the_machine_tying_flags(cpu_build):
    meta, body = _split_card(render_card(cpu_build).path.read_text())
    assert "on **the CPU AMD EPYC 7B13 64-Core Processor (2 cores)**" in body
    assert "the CPU of the build machine, AMD EPYC 7B13 64-Core Processor (2 cores), x86_64" in body
    assert "`-march=native` makes the compiler target whatever processor it runs on" in body
    assert "`-mavx2`" in body and "`CPU_CAPABILITY_AVX2`" in body
    assert "gpu-kernels" not in meta["tags"] and "cpu-kernels" in meta["tags"]
    assert "C++" in meta["pretty_name"] and "curate default" not in body  # a title, not the tool
    assert meta["pretty_name"] == "C++ kernel pairs from the default pipeline"


def test_cpu_card_says_how_many_threads_timed_each_call(cpu_build):
    """A CPU speedup measured on one thread is not a multi-threaded one: the card says which,
    from verify's stats, and says nothing where the build did not record it."""
    _, body = _split_card(render_card(cpu_build).path.read_text())
    assert "each on 1 thread" not in body
    stats = json.loads((cpu_build / "stats.json").read_text())
    verify = [s for s in stats["stages"] if s["name"] == "verify"]
    assert verify, [s["name"] for s in stats["stages"]]
    verify[0].setdefault("extra", {})["cpu_threads"] = 1
    (cpu_build / "stats.json").write_text(json.dumps(stats))
    _, body = _split_card(render_card(cpu_build).path.read_text())
    assert "reference and kernel each on 1 thread, one after the other" in body
    assert "fresh process pairs" not in body
    verify[0]["extra"]["retimed_rows"] = 3   # rows near the threshold, timed in three pairs
    (cpu_build / "stats.json").write_text(json.dumps(stats))
    _, body = _split_card(render_card(cpu_build).path.read_text())
    assert "the 3 rows whose lower bound lay within 20% of the threshold were timed in three " \
        "fresh process pairs" in body


def test_the_machine_is_recorded_once_per_build(tmp_path, monkeypatch):
    import curate.card.machine as machine
    build = make_build(tmp_path)
    monkeypatch.setattr(machine, "host", lambda: {"processor": "Build CPU", "cores": 8})
    assert record_machine(build)["processor"] == "Build CPU"
    monkeypatch.setattr(machine, "host", lambda: {"processor": "Laptop", "cores": 4})
    assert record_machine(build)["processor"] == "Build CPU"  # a later render: same build
    (build / "stats.json").write_text((build / "stats.json").read_text() + " ")
    assert record_machine(build)["processor"] == "Laptop"     # a new build on this machine


def test_a_gpu_build_keeps_the_gpu_tag(tmp_path):
    meta, body = _split_card(render_card(make_build(tmp_path), repo_id="org/cuke")
                             .path.read_text())
    assert "gpu-kernels" in meta["tags"] and "on **NVIDIA H200**" in body


def test_every_reason_on_kept_rows_is_explained_as_a_warning(cpu_build):
    _, body = _split_card(render_card(cpu_build).path.read_text())
    warnings = body[body.index("- **Warnings**"):body.index("- **What verification caught")]
    gates = body[body.index("- **Gates**"):body.index("- **Warnings**")]
    for reason in KEPT_REASONS:
        row = re.search(rf"^  \| `{re.escape(reason)}` \| (\d+) \| (.+) \|$", warnings, re.M)
        assert row, reason
        assert row[2] == R.meaning(reason).replace("|", "\\|") and "not described" not in row[2]
        assert f"`{reason}`" not in gates  # a warning is not listed as a failing gate
    assert "`torch_in_forward` |" in gates and "`work_outside_call` |" in gates
    # a failed row's warnings are not "what verification caught"
    caught = body[body.index("- **What verification caught"):body.index("## Counts per stage")]
    assert "builds_with_subprocess" not in caught


def test_every_warning_the_gates_can_write_has_a_meaning():
    """Read the gates' sources for (reason, WARN) findings: the card explains each one."""
    src = Path(__file__).resolve().parents[1] / "curate" / "verify"
    warns, sometimes = set(), set()  # always a warning; a warning on some devices
    for path in src.rglob("*.py"):
        text = path.read_text()
        for m in re.finditer(r"""\(f?["']([a-z0-9_]+)(:\{[^}]*\})?["'],\s*WARN\)""", text):
            warns.add(m[1] + (":x" if m[2] else ""))
        sometimes |= set(re.findall(r"""flag\(["']([a-z0-9_]+)["'],\s*fatal=(?!True)""", text))
    # gates whose severity is the table's (curate/verify/findings.py): a reason is the gate's
    # name, or the name and a detail (`kernel_unused:<kernel>`)
    from curate.verify.findings import GATES
    warns |= {n if R.lookup(n) else f"{n}:x" for n, g in GATES.items() if g.severity == "warn"}
    assert {"builds_with_subprocess", "ctypes_loader", "torch_ops_in_forward", "tf32"} <= warns
    missing = sorted(r for r in warns if R.lookup(r) is None or R.lookup(r)[0] != R.WARN)
    missing += sorted(r for r in sometimes if R.lookup(r) is None)
    assert not missing, f"add these warnings to curate/card/reasons.py: {missing}"


def test_the_card_names_no_file_the_dataset_repository_lacks(cpu_build):
    card = render_card(cpu_build, repo_id="org/cuke")
    shipped = set(publish_files(cpu_build))
    text = card.path.read_text()
    named = set(re.findall(r"[\w./-]+\.(?:md|py|yaml|json|parquet|png)\b", text))
    named = {n for n in named if not n.startswith(("data/", "infill/")) or "*" in n}
    assert "DESIGN.md" not in text
    assert named <= shipped | {"README.md"}, named - shipped


def test_plots_add_up_and_keep_their_labels_whole(cpu_build):
    from curate.card.plots import _dropped_bars, _wrap
    f = gather(cpu_build)
    labels, counts = _dropped_bars(f, top=3)  # few bars: the rest is one "other" bar
    rejected = pq.ParquetFile(cpu_build / "rejected.parquet").metadata.num_rows
    assert sum(counts) == rejected == f.rejected_total
    assert labels[-1].endswith("other reasons")
    long = "synth-inductor: fallback:aten._scaled_dot_product_flash_attention_for_cpu"
    assert _wrap(long).replace("\n", "") == long and "..." not in _wrap(long)
    assert max(len(line) for line in _wrap(long).split("\n")) <= 44


def test_no_image_of_a_table_the_text_shows(cpu_build):
    (cpu_build / "assets").mkdir()
    (cpu_build / "assets" / "per_source.png").write_bytes(b"old")  # an earlier render's
    card = render_card(cpu_build)
    assert sorted(card.assets) == ["rejections", "speedup_histogram"]
    assert not (cpu_build / "assets" / "per_source.png").exists()
    assert "| source | pairs | share |" in card.path.read_text()


def test_a_hub_evaluation_set_is_named_with_its_revision(tmp_path):
    build = make_build(tmp_path, decontam="done")
    stats = json.loads((build / "stats.json").read_text())
    dedup = next(s for s in stats["stages"] if s["name"] == "dedup")
    dedup["extra"]["decontaminated_against"] = {"@kernelbench": "/root/.cache/huggingface/hub/"
        "datasets--ScalingIntelligence--KernelBench/snapshots/0123456789abcdef0123"}
    (build / "stats.json").write_text(json.dumps(stats))
    body = render_card(build).path.read_text()
    assert ("@kernelbench (the Hub dataset ScalingIntelligence/KernelBench at revision "
            "0123456789ab)") in body


def test_the_card_states_the_sandbox_the_rows_ran_under(tmp_path):
    """Every kept row's `sandbox` is counted on the card; `none` is said out loud."""
    from curate.card.facts import Facts
    f = Facts.__new__(Facts)
    f.rows = {"sandbox": ["bwrap+uid+landlock", "bwrap+uid+landlock", "none"]}
    assert f.sandboxes == [("bwrap+uid+landlock", 2), ("none", 1)]
