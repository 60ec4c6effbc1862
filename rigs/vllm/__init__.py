"""One vLLM V1 driver over the release table: :mod:`.releases` (what differs between releases, as
data, and where each runs), :mod:`.engine` (vLLM's own scheduler stepped as EngineCore steps it,
model output made here), and the real vLLM CPU server the server tier and the page benchmark start
(:mod:`.server`, :mod:`.page`, :mod:`.fault_plugin`, :mod:`.tiny_model`).  :mod:`.engine` imports
vLLM: it runs inside a release venv (:meth:`rigs.venv.Venv.run`)."""
