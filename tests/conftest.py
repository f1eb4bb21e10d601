"""Shared fixtures. Real data kept beside the project (KernelBench) is found through
--kernelbench or $CURATE_KERNELBENCH; tests that need it skip with a reason when it is absent."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pytest_addoption(parser):
    parser.addoption("--kernelbench", default=None,
                     help="folder of KernelBench problems (level1/ ...); default: "
                          "$CURATE_KERNELBENCH or ../shared/data/kernelbench")


# each GPU test's own limit, unless it names one (pytest-timeout; it counts the wait for the
# GPU lock below): a test that asserts a speed may wait for every other GPU test to end
GPU_TEST_LIMIT_S = {"gpu": 240, "gpu_timing": 360}


def pytest_collection_modifyitems(config, items):
    """Every GPU test gets a time limit of its own, so that one hang cannot take the whole
    `pytest -m gpu` run with it. Tests that hold the GPU alone come last: given out early, one
    would wait for the lock with other tests queued behind it on its worker."""
    for item in items:
        if item.get_closest_marker("gpu") and not item.get_closest_marker("timeout"):
            kind = "gpu_timing" if item.get_closest_marker("gpu_timing") else "gpu"
            item.add_marker(pytest.mark.timeout(GPU_TEST_LIMIT_S[kind]))
    items.sort(key=lambda item: item.get_closest_marker("gpu_timing") is not None)


def pytest_runtest_logreport(report):
    """With $CURATE_TEST_FAILURES set, each failure's report is appended to that file as soon as
    it happens: a GPU run cut at its time limit (before pytest's summary) still says why."""
    path = os.environ.get("CURATE_TEST_FAILURES")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(f"== {report.nodeid} ({report.when}, {report.duration:.1f}s)\n"
                    f"{report.longreprtext[-6000:]}\n{report.capstdout[-3000:]}\n")


@pytest.fixture(autouse=True)
def _gpu_share(request, tmp_path_factory):
    """GPU tests run side by side (`pytest -m gpu -n 4`), except one that asserts a measured
    speed: it holds the GPU alone (an exclusive lock; every other GPU test holds it shared), as
    verify's own timing gate does within one run."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    import fcntl
    # the parent of this process's base temp folder is shared by every xdist worker of the run
    path = tmp_path_factory.getbasetemp().parent / "curate-gpu.lock"
    alone = request.node.get_closest_marker("gpu_timing") is not None
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def kernelbench_dir(request) -> Path:
    opt = request.config.getoption("--kernelbench")
    if opt:
        os.environ["CURATE_KERNELBENCH"] = opt
    from curate.sources.locate import kernelbench_path
    path = kernelbench_path()
    if path is None or not path.is_dir():
        pytest.skip("needs the KernelBench problems: pass --kernelbench DIR or set "
                    "CURATE_KERNELBENCH")
    return path


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return ROOT / "examples"


@pytest.fixture(scope="module")
def ray_cluster():
    """A Ray cluster on loopback that the tests start and stop: 2 CPUs, an 80 MB object store,
    no dashboard; its address (GCS) for `curate build --executor ray --ray-address`. Per module:
    no other test runs beside a Ray driver's threads."""
    ray = pytest.importorskip("ray", reason='needs Ray: pip install "curate[ray]"')
    from ray._private import ray_constants
    cluster_mode = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False  # Ray's own switch: the node on 127.0.0.1
    ctx = ray.init(num_cpus=2, object_store_memory=80 * 2**20, include_dashboard=False,
                   runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    address = ctx.address_info["gcs_address"]
    assert address.startswith("127.0.0.1:"), address
    yield address
    ray.shutdown()
    ray_constants.ENABLE_RAY_CLUSTER = cluster_mode
