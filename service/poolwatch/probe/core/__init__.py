"""The probe's engine-neutral machinery: settings, reading foreign objects without raising, error
containment, the published snapshot and the kill switch.  It never imports an engine room."""
