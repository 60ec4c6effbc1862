"""Generated artifacts (rules, dashboards, the README metric table) and the drift check."""
