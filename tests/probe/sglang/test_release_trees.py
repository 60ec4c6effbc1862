"""A release family read as its rank's tree keeps it: 0.5.6's MambaRadixCache leaves
``cache_protected_len`` at the first match and moves ``prefix_indices`` (its radix cache moves both);
0.5.9's moves both in every tree."""

from __future__ import annotations

from poolwatch.probe.sglang.shapes import HeldRule, for_tree, shape_for_version


class RadixCache:
    pass


class MambaRadixCache(RadixCache):
    pass


class HiMambaRadixCache(MambaRadixCache):  # a subclass reads as the class it extends
    pass


def test_0_5_6s_mamba_tree_is_read_by_its_prefix_and_its_radix_cache_by_what_it_protects() -> None:
    shape = shape_for_version("0.5.6")
    assert shape.held_rule is HeldRule.ALLOCATED_PROTECTED
    assert for_tree(shape, MambaRadixCache()).held_rule is HeldRule.ALLOCATED_PREFIX
    assert for_tree(shape, HiMambaRadixCache()).held_rule is HeldRule.ALLOCATED_PREFIX
    assert for_tree(shape, RadixCache()) is shape
    assert for_tree(shape, None) is shape  # a rank without a tree yet: the family's rule


def test_every_other_family_reads_every_tree_as_the_family_does() -> None:
    for version in ("0.5.4.post1", "0.5.5.post3", "0.5.9", "0.5.10", "0.5.12", "0.5.23"):
        shape = shape_for_version(version)
        assert for_tree(shape, MambaRadixCache()) is shape, version


def test_0_5_6_reads_its_own_hybrid_flags() -> None:
    assert shape_for_version("0.5.5.post3").hybrid_flags == ("is_hybrid", "is_hybrid_gdn")
    assert shape_for_version("0.5.6").hybrid_flags == ("is_hybrid_swa", "is_hybrid_gdn")
    assert shape_for_version("0.5.9").hybrid_flags == ("is_hybrid_swa", "is_hybrid_ssm")
