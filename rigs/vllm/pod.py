"""The rendered vLLM pod example (``deploy/kubernetes/examples/vllm``) on loopback: its sidecar as
``poolwatch serve`` with the container's environment and the image's command, each volume a
directory, Alertmanager's Service and vLLM's ``127.0.0.1:8000`` mapped to local ports, and the
``vllm`` container's poolwatch environment for the real server that stands in its place.  Shared
by the page run (:mod:`rigs.vllm.page`) and the end-to-end test of vLLM's pages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rigs.stack import deployed
from rigs.stack.manifests import container, workloads
from rigs.stack.processes import free_port

__all__ = ["EXAMPLE", "NAMESPACE", "POD", "Pod", "example_pod"]

EXAMPLE = "deploy/kubernetes/examples/vllm"
POD = "vllm-0"
NAMESPACE = "default"  # the example names none: where `kubectl apply -k` puts it without -n


@dataclass(frozen=True)
class Pod:
    """The vLLM example's pod on loopback: the sidecar's process, and the engine container's
    poolwatch environment (the probe's switches) and log file (what its ``tee`` writes)."""

    sidecar: deployed.Pod
    engine_env: dict[str, str]
    log: Path


def example_pod(root: Path, rendered: deployed.Rendered, am_port: int, vllm_port: int) -> Pod:
    """The rendered vLLM example's pod with its volumes under ``root/pods/<pod>``, Alertmanager's
    Service and vLLM's ``127.0.0.1:8000`` mapped to the local ports, the sidecar on a free port."""
    (workload,) = workloads(rendered.docs)
    metadata, spec = workload["spec"]["template"]["metadata"], workload["spec"]["template"]["spec"]
    sidecar, engine = container(spec, "poolwatch", init=True), container(spec, "vllm", init=False)
    namespace = workload["metadata"].get("namespace", NAMESPACE)
    pod_root = root / "pods" / POD
    for mount in [*sidecar["volumeMounts"], *engine["volumeMounts"]]:
        (pod_root / mount["name"]).mkdir(parents=True, exist_ok=True)
    addresses = {
        "alertmanager-operated.monitoring.svc:9093": f"127.0.0.1:{am_port}",
        "127.0.0.1:8000": f"127.0.0.1:{vllm_port}",
    }
    env = deployed.on_loopback(
        deployed.pod_env(metadata, sidecar, POD, namespace), sidecar, pod_root, addresses
    )
    port = free_port()
    env |= {"POOLWATCH_HOST": "127.0.0.1", "POOLWATCH_PORT": str(port)}
    role = metadata["labels"]["poolwatch.io/role"]
    pod = deployed.Pod(POD, namespace, role, pod_root, env, deployed.image_command(), port)
    ours = {**engine, "env": [v for v in engine["env"] if v["name"].startswith("POOLWATCH_")]}
    engine_env = deployed.on_loopback(
        deployed.pod_env(metadata, ours, POD, namespace), engine, pod_root, addresses
    )
    return Pod(pod, engine_env, Path(env["POOLWATCH_LOG_PATHS"]))
