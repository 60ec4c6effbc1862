"""Guard v2 (guard mode only): refuse, before it runs, a free of a slot that is provably still owned.

Guard v1 (:mod:`poolwatch.probe.sglang.repair`) takes a wrongly freed slot back off a free list at
the next hook, after the free already ran.  Guard v2 wraps each release family's free paths on the
instance and drops, before SGLang's own code runs, what one of its proofs shows owned -- so
SGLang's bookkeeping stays exactly as if the wrong free had never been called:

=============  ==================================  =============================================
pool           proofs                              module
=============  ==================================  =============================================
mamba          live (the chunked request's slot),  :mod:`~poolwatch.probe.sglang.guard.slots`,
               tree (a node's value)               :mod:`~poolwatch.probe.sglang.guard.tree_index`
mamba_ckpt     tree (a node's checkpoint slot)     the same, on 0.5.23's ``mamba_ckpt_pool``
full, swa      released row (a stale row view),    :mod:`~poolwatch.probe.sglang.guard.kv`,
               free (the SWA pair's sides)         :mod:`~poolwatch.probe.sglang.guard.rows`
=============  ==================================  =============================================

Which free paths each family has is data: :mod:`~poolwatch.probe.sglang.guard.paths`.  The rank's
one object is :class:`~poolwatch.probe.sglang.guard.refuser.FreeRefuser`; methods are replaced on
the instance by :mod:`~poolwatch.probe.sglang.guard.patch`.  Off on a release newer than the
newest read (``Release.verified`` false) and with every kill switch.
"""
