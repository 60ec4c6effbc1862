"""The shipped Alertmanager routing, generated twice from one description
(:mod:`~poolwatch.artifacts.alertmanager.routing`): the plain configuration
(:mod:`~poolwatch.artifacts.alertmanager.plain`) and the ``AlertmanagerConfig`` object
(:mod:`~poolwatch.artifacts.alertmanager.crd`), written by
:func:`~poolwatch.artifacts.alertmanager.configs.artifacts`."""
