"""The completions sent while a real vLLM server's double free strikes (:mod:`rigs.vllm.page`): a
:class:`Load` names how many clients send and how far apart, :class:`Clients` sends them, the
fault request among them.  Every prompt is its own (a leading number makes each block unique), so
no prefix is shared and the fault's blocks are the ones vLLM frees twice.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

import httpx

from rigs.vllm.fault_plugin import FAULT_MAX_TOKENS

__all__ = ["LOADS", "Clients", "Load"]

_WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]


@dataclass(frozen=True)
class Load:
    """Completions sent while the fault strikes: ``clients`` each send one request after another,
    ``gap`` s apart; the fault request goes out ``warm`` s after the load starts."""

    name: str
    clients: int
    gap: float
    warm: float = 5.0
    max_tokens: int = 16


LOADS = {
    "busy": Load("busy", clients=4, gap=0.0),
    "light": Load("light", clients=1, gap=1.0),
}


def _prompt(i: int) -> str:
    """A prompt of its own: the leading number makes its first block (and so every block) unique."""
    return f"{i} " + " ".join(_WORDS[(i + k) % len(_WORDS)] for k in range(90))


class Clients:
    """``load.clients`` threads sending completions one after another, ``load.gap`` s apart, until
    stopped.  The first request the first client starts ``load.warm`` s in is the fault request: it
    takes that client's turn, so the client's next request (``gap`` s after it ends) is the one
    that finds the fault's last block at the front of the free queue."""

    def __init__(self, url: str, model: str, load: Load) -> None:
        self.url, self.model, self.load = url, model, load
        self.sent = 0
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._client, args=(i == 0,), daemon=True) for i in range(load.clients)
        ]

    def start(self) -> Clients:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        for t in self._threads:
            t.join(timeout=70)

    def _next(self) -> int:
        with self._lock:
            self.sent += 1
            return self.sent

    def _send(self, client: httpx.Client, prompt: str, max_tokens: int) -> None:
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
        with contextlib.suppress(httpx.HTTPError):
            client.post(f"{self.url}/v1/completions", json=body | {"temperature": 0}, timeout=60)

    def _client(self, faults: bool) -> None:
        due = time.monotonic() + self.load.warm if faults else None
        with httpx.Client() as client:
            while not self.stopped.is_set():
                if due is not None and time.monotonic() >= due:
                    due = None
                    self._send(client, "fault " + _prompt(self._next()) * 3, FAULT_MAX_TOKENS)
                else:
                    self._send(client, _prompt(self._next()), self.load.max_tokens)
                self.stopped.wait(self.load.gap)
