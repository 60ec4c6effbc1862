"""One SGLang driver over the release table: :mod:`.releases` (what differs between releases, as
data), :mod:`.rank` (a scheduler-shaped rank on the release's own pools, tree and checks),
:mod:`.steps` (the scheduler's steps in the release's API), :mod:`.driver` (a rank driven through
them with the probe attached as deployed) and :mod:`.server_args`.  All but :mod:`.releases` import
SGLang: they run inside a release venv (:meth:`rigs.venv.Venv.run`)."""
