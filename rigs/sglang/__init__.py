"""One SGLang driver over the release table: :mod:`.releases` (what differs between releases, as
data), :mod:`.rank` (a scheduler-shaped rank on the release's own pools, tree and checks) and
:mod:`.driver` (the scheduler's steps on it, in the release's API).  :mod:`.rank` and :mod:`.driver`
import SGLang: they run inside a release venv (:meth:`rigs.venv.Venv.run`)."""
