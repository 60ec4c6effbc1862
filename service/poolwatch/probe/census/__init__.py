"""Exact slot ownership proofs: what the id sets of one pool prove, and the census report (pure,
engine-neutral)."""
