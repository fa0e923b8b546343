"""A three-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), shared by the session."""

from __future__ import annotations

import pytest
import ray  # a dev dependency: missing must fail, not skip
from ray.cluster_utils import Cluster

from agentgym.models import tiny_model_dir


@pytest.fixture(scope="session")
def cluster():
    """A head node and two worker nodes with one logical CPU each; Ray initialised against it."""
    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(2):
        nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, log_to_driver=False)
    yield nodes
    ray.shutdown()
    nodes.shutdown()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """The default tiny Qwen2 model folder (built once per session)."""
    return str(tiny_model_dir(tmp_path_factory.getbasetemp() / "agentgym-tiny-models"))
