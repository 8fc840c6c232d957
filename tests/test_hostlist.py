"""Slurm hostlists (ingest/hostlist.py): Slurm's own documented examples, worked by hand,
and properties on generated names and hostlists."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.hostlist import compress, expand


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        # the events page's example, and a two-node job
        ("gpu-a[01-02,07]", ["gpu-a01", "gpu-a02", "gpu-a07"]),
        ("gpu-node-[01-02]", ["gpu-node-01", "gpu-node-02"]),
        # slurm.conf(5), NodeName: "linux[0-64,128]", "lx[15,18,32-33]"
        ("lx[15,18,32-33]", ["lx15", "lx18", "lx32", "lx33"]),
        # a range is as wide as its first number; without padding, as wide as the number
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        # several bracket groups: the first varies slowest
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
        # plain lists, commas outside brackets, and both together
        ("a,b", ["a", "b"]),
        ("gpu-a[01-02],gpu-b07", ["gpu-a01", "gpu-a02", "gpu-b07"]),
        ("cpu-node-02", ["cpu-node-02"]),
        # sacct's words for a job that has no nodes yet
        ("None assigned", []),
        ("(null)", []),
        ("", []),
    ],
)
def test_hostlists_as_slurm_documents_them(hostlist: str, names: list[str]) -> None:
    assert expand(hostlist) == names


def test_slurm_conf_large_examples() -> None:
    # slurm.conf(5): "linux[0-64,128]" (66 names), "linux[0000-1023]" (fixed 4 digits),
    # "rack[0-63]_blade[0-41]" (64 × 42 = 2,688 names).
    linux = expand("linux[0-64,128]")
    assert (len(linux), linux[0], linux[64], linux[65]) == (66, "linux0", "linux64", "linux128")
    padded = expand("linux[0000-1023]")
    assert (len(padded), padded[0], padded[9], padded[-1]) == (
        1024,
        "linux0000",
        "linux0009",
        "linux1023",
    )
    blades = expand("rack[0-63]_blade[0-41]")
    assert len(blades) == 2688
    assert blades[:2] + blades[41:43] + blades[-1:] == [
        "rack0_blade0",
        "rack0_blade1",
        "rack0_blade41",
        "rack1_blade0",
        "rack63_blade41",
    ]


@pytest.mark.parametrize(
    ("hostlist", "reason"),
    [
        ("gpu[01-02", "'[' without ']' in 'gpu[01-02'"),
        ("gpu01]", "']' without '[' at character 6 of 'gpu01]'"),
        ("gpu[[1]]", "nested '[' at character 5 of 'gpu[[1]]'"),
        ("gpu[]", "not a number or range: '' in 'gpu[]'"),
        ("gpu[a-b]", "not a number or range: 'a-b' in 'gpu[a-b]'"),
        ("gpu[3-1]", "range '3-1' runs backwards in 'gpu[3-1]'"),
        # the bound: 100,001 names, or a product past it, refused before anything is expanded
        ("n[1-100001]", "'n[1-100001]' names more than 100,000 nodes"),
        (
            "a[1-1000]b[1-1000000000000]",
            "'a[1-1000]b[1-1000000000000]' names more than 100,000 nodes",
        ),
        ("n[1-60000],m[1-40001]", "'n[1-60000],m[1-40001]' names more than 100,000 nodes"),
    ],
)
def test_what_is_not_a_hostlist_is_refused_with_its_reason(hostlist: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        expand(hostlist)
    assert str(info.value) == reason


def test_exactly_the_bound_is_accepted() -> None:
    assert len(expand("n[1-60000],m[1-40000]")) == 100_000


@pytest.mark.parametrize(
    ("names", "hostlist"),
    [
        (["n1", "n2", "n3", "n7"], "n[1-3,7]"),
        (["n9", "n10"], "n[9-10]"),
        (["n09", "n10"], "n[09-10]"),
        (["n9", "n010"], "n[9,010]"),  # 010 is not how the range 9-10 prints its second number
        (["a", "b1", "b2", "c"], "a,b[1-2],c"),
        (["n1"], "n1"),
    ],
)
def test_compress_by_hand(names: list[str], hostlist: str) -> None:
    assert compress(names) == hostlist


_PREFIX = st.text(alphabet="abgpu-_.", max_size=6)
_NAME = st.builds(
    lambda p, n, w: p + str(n).zfill(w), _PREFIX, st.integers(0, 2000), st.integers(0, 4)
).filter(bool)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(_NAME, _PREFIX.filter(bool)), max_size=40))
def test_compress_then_expand_gives_the_names_back(names: list[str]) -> None:
    assert expand(compress(names)) == names


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 300), min_size=1, max_size=30, unique=True).map(sorted),
    st.integers(1, 4),
)
def test_runs_of_numbers_become_one_bracket_group(numbers: list[int], width: int) -> None:
    names = [f"gpu-{n:0{width}d}" for n in numbers]
    hostlist = compress(names)
    assert expand(hostlist) == names
    assert len(numbers) == 1 or hostlist.count("[") == 1


_GROUP = st.lists(
    st.tuples(st.integers(0, 30), st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=3
)


@settings(max_examples=50, deadline=None)
@given(st.lists(_PREFIX, min_size=1, max_size=3), st.data())
def test_several_groups_expand_as_a_product_first_group_slowest(
    literals: list[str], data: st.DataObject
) -> None:
    groups = [data.draw(_GROUP) for _ in literals[:-1]] if len(literals) > 1 else []
    text = literals[0]
    choices = []
    for literal, group in zip(literals[1:], groups, strict=True):
        text += (
            "["
            + ",".join(f"{lo:0{w}d}-{lo + extra:0{w}d}" for lo, extra, w in group)
            + "]"
            + literal
        )
        # each range printed as wide as its first number, as Slurm prints it
        choices.append(
            [
                f"{n:0{len(f'{lo:0{w}d}')}d}"
                for lo, extra, w in group
                for n in range(lo, lo + extra + 1)
            ]
        )
    expected = [
        "".join(x for pair in itertools.zip_longest(literals, combo, fillvalue="") for x in pair)
        for combo in itertools.product(*choices)
    ]
    if text:
        assert expand(text) == expected


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="ab0123456789[]-, ", max_size=30))
def test_any_text_is_names_or_a_value_error_within_the_bound(text: str) -> None:
    try:
        names = expand(text, limit=1000)
    except ValueError:
        return
    assert len(names) <= 1000 and all(names) and not any(c in n for n in names for c in "[], ")
