"""Which host policy an instance takes (runtime/host_policy.py and
backends/_common.instance_host_placement), as Triton's core names them:
the group's own host_policy, else cpu, gpu_<device> or model by kind; and
how --host-policy values read. Applying them is tests/integration/
test_host_policy.py's."""

import pytest

from pyserver.backends._common import instance_host_placement
from pyserver.config import parse_config_text
from pyserver.runtime.host_policy import (
    HostPolicyError,
    Placement,
    check_setting,
    parse_cpu_cores,
    parse_host_policy_flags,
    policy_name,
)

CONFIG = """name: "m"
backend: "python"
instance_group [
  { name: "on_cpu" count: 1 kind: KIND_CPU },
  { name: "on_gpus" count: 2 kind: KIND_GPU gpus: [ 0, 3 ] },
  { name: "named" count: 1 kind: KIND_GPU gpus: [ 1 ] host_policy: "numa1" },
  { name: "whole" count: 1 kind: KIND_MODEL }
]
"""


def test_each_instance_takes_its_groups_policy_or_its_kinds():
    config = parse_config_text(CONFIG)
    policies = {"cpu": {"cpu-cores": "0-1"}, "gpu_3": {"numa-node": "1"},
                "numa1": {"cpu-cores": "4-5,8-8", "numa-node": "1"}}
    found = {name: instance_host_placement(config, name, policies)
             for name in ("on_cpu_0", "on_gpus_0", "on_gpus_1", "on_gpus_2", "named_0",
                          "whole_0")}
    assert {n: p.name for n, p in found.items()} == {
        "on_cpu_0": "cpu", "on_gpus_0": "gpu_0", "on_gpus_1": "gpu_0", "on_gpus_2": "gpu_3",
        "named_0": "numa1", "whole_0": "model"}
    assert found["on_cpu_0"].cpus == {0, 1} and found["on_cpu_0"].numa_node is None
    assert not found["on_gpus_0"]  # gpu_0 was given no settings: runs anywhere
    assert found["on_gpus_2"].cpus is None and found["on_gpus_2"].numa_node == 1
    assert found["named_0"].cpus == {4, 5, 8}
    assert found["named_0"].message() == {"numa1": {"cpu-cores": "4-5,8-8", "numa-node": "1"}}
    assert instance_host_placement(config, "on_cpu_0", None).message() == {"cpu": {}}


def test_policy_names_and_flags_read_as_tritons():
    assert policy_name("KIND_GPU", 2) == "gpu_2"
    assert policy_name("KIND_CPU", 0) == "cpu" and policy_name("KIND_MODEL", 0) == "model"
    assert policy_name("KIND_GPU", 2, "mine") == "mine"
    assert parse_host_policy_flags(["p,cpu-cores=0-1", "p,numa-node=0", "p,cpu-cores=2-3"]) == {
        "p": {"cpu-cores": "2-3", "numa-node": "0"}}  # a later value of a setting wins
    assert parse_host_policy_flags(["gpu_0,cpu-cores=0-1,4-4"]) == {
        "gpu_0": {"cpu-cores": "0-1,4-4"}}  # the value keeps its commas
    assert parse_cpu_cores("3-3,0-1") == {0, 1, 3}
    for bad in ("p", "p,", "p,cpu-cores", "p,=1", ",cpu-cores=0-1", "p,cpu-cores="):
        with pytest.raises(HostPolicyError, match="--host-policy option format is"):
            parse_host_policy_flags([bad])
    # settings and values are the server's to check (check_setting), once
    assert parse_host_policy_flags(["p,gpu=0"]) == {"p": {"gpu": "0"}}
    with pytest.raises(HostPolicyError, match="Unsupported host policy setting 'gpu'"):
        check_setting("gpu", "0")
    with pytest.raises(HostPolicyError, match="Got 1"):
        check_setting("cpu-cores", "0-0,1")
    with pytest.raises(HostPolicyError, match="Can't parse 'x' to integer"):
        check_setting("numa-node", "x")
    assert not Placement("cpu") and Placement("cpu", {"numa-node": "0"})
