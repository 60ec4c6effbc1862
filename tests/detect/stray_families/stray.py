"""A module of a families package that forgot its ``FAMILY``."""

VALUE = 1
