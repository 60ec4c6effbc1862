"""Detection: snapshot streams in, alerts out.

The sidecar wires it with ``from poolwatch.sidecar.alerting import build_alerting`` (not re-exported
here: the notifiers import this package's values, and the wiring imports the notifiers).

``rules`` holds the alert definitions (one source for the detector, the Prometheus rules and the
runbooks); ``families`` lists the alert families the detector judges, each one object with its
signals and verdicts (``balance``, ``forecast``, ``health``, ``repairs``, ``incidents``; what a
family is: ``family``); ``trend`` the leak rate, ``tracker`` the pending -> firing -> resolved
state machine, ``detector`` the per-rank bookkeeping around it.
"""
