"""A families package with a module that declares no family (test_families.py: discovery refuses it)."""
