"""Who a worker is: the one place that names a worker and its pod, for the probe, sidecar and sources.

A *worker* is one SGLang server (a pod, in Kubernetes); its scheduler ranks are told apart by their
dp/tp/pp ranks.  Every source describing one server -- the in-process probe, SGLang's ``/metrics``,
SGLang's log -- must name it alike, or one rank shows up as two or three workers:

* the worker's name is ``POOLWATCH_WORKER``, else ``POD_NAME``, else the host name (in a pod: the
  pod's name).  SGLang's container (the probe) and the sidecar's container read it the same way,
  and in one pod they share the host name, so both name the worker alike with no configuration;
* a *per-pod* sidecar's own sources (``--probe-urls``, at most one ``--metrics-urls`` server and
  its ``--log-paths``) all describe its pod and take the sidecar's worker name, whatever the log
  file or the address is called;
* a *central* sidecar (several servers: a targets file, or several ``--metrics-urls``) names each
  target after its ``worker:`` field; a URL without one is named after its ``host:port``; a log
  needs one, since a file's name does not say who wrote it;
* a discovered probe keeps the name its probe announced (several workers may share a directory),
  which is the same name by the first rule;
* the *placement* labels are the ``namespace`` and ``pod`` the sidecar runs in: what Prometheus
  attaches to every series it scrapes from that pod.  The sidecar's own alerts carry them too, so
  both alert paths raise the same label set and Alertmanager merges them.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from poolwatch.model.rank import SourceKind

__all__ = [
    "PLACEMENT_LABELS",
    "NoWorkerName",
    "namespace_name",
    "pod_name",
    "target_worker",
    "url_worker",
    "worker_name",
]

PLACEMENT_LABELS: tuple[str, ...] = ("namespace", "pod")  # on every sidecar alert, as Prometheus adds them
_WORKER_ENV = ("POOLWATCH_WORKER", "POD_NAME")


class NoWorkerName(ValueError):
    """A target whose worker cannot be told from its configuration."""


def worker_name(environ: Mapping[str, str], hostname: Callable[[], str] = socket.gethostname) -> str:
    """The worker this process belongs to: ``POOLWATCH_WORKER``, ``POD_NAME``, the host name."""
    for name in _WORKER_ENV:
        value = environ.get(name, "").strip()
        if value:
            return value
    return hostname() or "worker"


def pod_name(environ: Mapping[str, str], hostname: Callable[[], str] = socket.gethostname) -> str:
    """The pod this process runs in: ``POOLWATCH_POD``, ``POD_NAME``, or -- inside Kubernetes
    (``KUBERNETES_SERVICE_HOST`` set) -- the host name; ``""`` outside Kubernetes."""
    for name in ("POOLWATCH_POD", "POD_NAME"):
        value = environ.get(name, "").strip()
        if value:
            return value
    return hostname() if environ.get("KUBERNETES_SERVICE_HOST") else ""


def namespace_name(environ: Mapping[str, str]) -> str:
    """The namespace this process runs in: ``POOLWATCH_NAMESPACE``, ``POD_NAMESPACE`` or ``""``."""
    for name in ("POOLWATCH_NAMESPACE", "POD_NAMESPACE"):
        value = environ.get(name, "").strip()
        if value:
            return value
    return ""


def url_worker(url: str) -> str:
    """The worker a server address names when nobody said otherwise: its ``host:port``."""
    return urlsplit(url).netloc or url


def target_worker(kind: str, location: str, *, given: str = "", pod_worker: str = "") -> str:
    """The worker a target's snapshots carry.

    ``given``: the target's own ``worker`` setting; ``pod_worker``: the sidecar's worker when the
    target is one of its pod's own sources.  A probe or a snapshot file with neither names itself
    (``""``: the payload's name stands); a server is named after its address; a log must be told.
    """
    if given or pod_worker:
        return given or pod_worker
    if kind in (SourceKind.PROBE, SourceKind.FILE):
        return ""
    if SourceKind(kind).channel == "log":
        raise NoWorkerName(f"{location}: a log target needs the worker whose log it is (worker:)")
    return url_worker(location)
