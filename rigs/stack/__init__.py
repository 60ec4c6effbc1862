"""The deployed stack on loopback, as the end-to-end tests and the page benchmarks run it: the
manifests rendered as a user renders them (:mod:`.manifests`), what the stack takes from them
(:mod:`.deployed`), real Prometheus and Alertmanager (:mod:`.prometheus`), the sidecars started as
the rendered pods configure them (:mod:`.launch`), loopback receivers (:mod:`.receivers`), and the
processes, ports and waits under all of it (:mod:`.processes`).  A missing tool (``prometheus``,
``prometheus-alertmanager``, ``kubectl``) raises :class:`rigs.venv.Unavailable`."""
