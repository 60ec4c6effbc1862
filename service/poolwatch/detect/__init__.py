"""Detection: snapshot streams in, alerts out.

The sidecar wires it with ``from poolwatch.sidecar.alerting import build_alerting`` (not re-exported
here: the notifiers import this package's values, and the wiring imports the notifiers).

The alerts come in detector families, one module each under ``families`` (what a family is:
``family``): each holds its verdicts, its alert definitions (PromQL, severity, text, runbook) and the
catalogue metrics its rules read.  ``rules`` lists every family (``FAMILIES``, found in the package)
and every alert they raise, the one source for the detector, the Prometheus rules, the runbooks, the
README and the dashboards' alert panels.  What an engine will do next with a finding -- the words
and the crash a page promises -- is ``outcome``, from the engine registry's facts; a finding in
words is ``evidence``.  ``judges`` runs each family's judge for the detector, ``trend`` the leak
rate, ``tracker`` (with ``track``) the pending -> firing -> resolved state machine, ``detector`` the
per-rank bookkeeping around it.
"""
