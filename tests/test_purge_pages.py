"""A purge's ranges told a page at a time: a process that was told only some of the pages
(another process carried the purge out meanwhile) never takes them for all of its ranges."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stm._deletions import Purge
from stm._lineage import Range
from stm.store._base import PurgeUser


@st.composite
def _paged(draw: st.DrawFn) -> tuple[list[list[Range]], list[bool]]:
    """A purge's ranges (chains in increasing order) cut into pages, and which of the
    pages this process tells (the others another process told)."""
    chains = sorted(draw(st.sets(st.integers(min_value=1, max_value=10_000), max_size=40)))
    ranges = [Range(chain, draw(st.integers(min_value=1, max_value=9))) for chain in chains]
    cuts = sorted(draw(st.sets(st.integers(min_value=1, max_value=max(1, len(ranges))))))
    pages, start = [], 0
    for cut in [*cuts, len(ranges)]:
        if cut > start:
            pages.append(ranges[start:cut])
            start = cut
    if not pages:
        pages = [[]]
    here = draw(st.lists(st.booleans(), min_size=len(pages), max_size=len(pages)))
    return pages, here


@given(_paged())
def test_a_purge_told_some_pages_elsewhere_never_takes_them_for_all(
    paged: tuple[list[list[Range]], list[bool]],
) -> None:
    """Each page told here names the chain it starts after, as the store tells it: the
    ranges come back whole when every page was told here, and never in part; a process
    told the last page but not every one knows it missed some."""
    pages, here = paged
    purge = Purge(PurgeUser(1, None))
    got = None
    after = 0
    for number, (page, mine) in enumerate(zip(pages, here, strict=True)):
        last = number == len(pages) - 1
        if mine:
            got = purge.tell(page, last, after)
            if not last:
                assert got is None
        if page:
            after = page[-1].chain
    everything = tuple(r for page in pages for r in page)
    if all(here):
        assert got == everything
    else:
        assert got is None
        # Told the last page after missing some: it knows to read the ranges whole (a
        # process whose steps go on past the last page without it learns so from them).
        if here[-1]:
            assert purge.gapped
