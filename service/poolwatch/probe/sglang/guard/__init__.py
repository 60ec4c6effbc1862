"""Guard v2 (guard mode only): refuse, before it runs, a free of a slot that is provably still owned.

Guard v1 (:mod:`poolwatch.probe.sglang.repair`) takes a wrongly freed slot back off a free list at
the next hook, after the free already ran.  Guard v2 wraps each release family's free paths on the
instance and drops, before SGLang's own code runs, what one of its proofs shows owned -- so
SGLang's bookkeeping stays exactly as if the wrong free had never been called:

=============  ==================================  =============================================
pool           proofs                              module
=============  ==================================  =============================================
mamba          live (the chunked request's slot),  :mod:`~poolwatch.probe.sglang.guard.slots`,
               tree (a value the tree holds now),  :mod:`~poolwatch.probe.sglang.guard.tree_index`,
               pending (a PD transfer's slot)      :mod:`~poolwatch.probe.sglang.guard.pending`
mamba_ckpt     tree (a checkpoint slot it holds)   the same, on 0.5.23's ``mamba_ckpt_pool``
full, swa      released row (a stale row view),    :mod:`~poolwatch.probe.sglang.guard.kv`,
               pending (a PD transfer's row),      :mod:`~poolwatch.probe.sglang.guard.rows`,
                                                   :mod:`~poolwatch.probe.sglang.guard.pending`,
               tree prefix (a held row's first     :mod:`~poolwatch.probe.sglang.guard.owners`,
               ``cache_protected_len`` columns,    :mod:`~poolwatch.probe.sglang.guard.takes`
               and, from 0.5.17, the columns the
               tree's insertions kept of it),
               free (the SWA pair's sides)
=============  ==================================  =============================================

Ownership is read *at the free*, not at the last census: the tree's insertions and own frees
(wrapped on the tree instance), the request rows' holders (noted at the row allocation) and a PD
PD rank's pending transfers (a prefill rank's inflight queue, a decode rank's transfer and
pre-allocation queues, outside SGLang's own processing of them) keep the index current between
censuses.

Which free paths each family has is data: :mod:`~poolwatch.probe.sglang.guard.paths`.  The rank's
one object is :class:`~poolwatch.probe.sglang.guard.refuser.FreeRefuser`; methods are replaced on
the instance by :mod:`~poolwatch.probe.sglang.guard.patch`.  Off on a release newer than the
newest read (``Release.verified`` false) and with every kill switch.
"""
