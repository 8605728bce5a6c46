"""Differencing as membership (`suppression.existence`): a withheld figure the published ones prove to hold
someone, with a lower bound of exactly 1, is found; the audit check blocks on it; brute force agrees."""

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tables import table_of

from spatial_release.suppression.existence import figures_at_lower_bound_one
from spatial_release.suppression.table import PRIMARY, PUBLISHED, SECONDARY, Table

P, S, U = PRIMARY, SECONDARY, PUBLISHED


def names(table: Table, nodes: list[int]) -> set[str]:
    return {table.area[n] for n in nodes}


def chained() -> Table:
    """p = a + b = 6 and q = b + c = 5 published; a = 2, b = 4, c = 1 withheld. b <= 5, so a >= 1: the
    attacker proves a holds someone, and the bound is exactly 1 (b = 5, c = 0 is feasible)."""
    return table_of(
        {"p": (6, U), "q": (5, U), "a": (2, P), "b": (4, S), "c": (1, P)},
        [("p", ["a", "b"]), ("q", ["b", "c"])],
    )


def test_a_figure_proven_to_hold_someone_at_exactly_one_is_found():
    table = chained()
    found = figures_at_lower_bound_one(table, k=5)
    assert names(table, found.at_one) == {"a"}
    assert not found.errors


def test_a_figure_whose_lower_bound_is_two_or_zero_is_not_at_one():
    # q = 4 instead of 5: b <= 4, so a >= 2 (two would have to leave before the proof goes): not at 1.
    table = table_of(
        {"p": (6, U), "q": (4, U), "a": (2, P), "b": (4, S), "c": (0, P)},
        [("p", ["a", "b"]), ("q", ["b", "c"])],
    )
    assert figures_at_lower_bound_one(table, k=5).at_one == []
    # a plain margin over two withheld figures: each can be 0
    loose = table_of({"p": (6, U), "a": (2, P), "b": (4, S)}, [("p", ["a", "b"])])
    assert figures_at_lower_bound_one(loose, k=5).at_one == []


def test_a_withheld_listed_zero_cell_is_at_one_by_its_public_floor():
    # a public structural-zero cell absent from the files held someone: the outsider's floor is 1
    table = table_of({"p": (7, U), "z": (1, P), "b": (6, S)}, [("p", ["z", "b"])])
    table.floor[table.index[("x", "z", 0)]] = 1
    assert names(table, figures_at_lower_bound_one(table, k=5).at_one) == {"z"}


def brute_lower_bounds(table: Table, interior: list[str], cap: int) -> dict[int, int]:
    """Every withheld figure's least value over all integer solutions (enumeration): the margins follow from
    the interior cells, each tried in [floor, cap] where withheld."""
    withheld = [i for i, s in enumerate(table.status) if s != PUBLISHED]
    free = [table.index[("x", name, 0)] for name in interior if table.status[table.index[("x", name, 0)]] != PUBLISHED]
    least = {i: cap + 1 for i in withheld}
    for values in itertools.product(range(cap + 1), repeat=len(free)):
        x = list(table.value)
        for i, v in zip(free, values):
            x[i] = v
        for r in table.relations:  # the margins (parents) from their interior children
            x[r.parent] = sum(x[c] for c in r.children)
        if any(x[i] != table.value[i] for i, s in enumerate(table.status) if s == PUBLISHED):
            continue
        if any(x[i] < table.lower_bound(i) for i in withheld):
            continue
        for i in withheld:
            least[i] = min(least[i], x[i])
    return least


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.integers(0, 3), min_size=4, max_size=4),
    withheld=st.sets(st.sampled_from(["x11", "x12", "x21", "x22", "r1", "c1"]), min_size=1, max_size=4),
)
def test_figures_at_one_equal_brute_force_on_small_two_way_tables(values, withheld):
    x11, x12, x21, x22 = values
    figures = {"x11": x11, "x12": x12, "x21": x21, "x22": x22}
    figures |= {"r1": x11 + x12, "r2": x21 + x22, "c1": x11 + x21, "c2": x12 + x22}
    table = table_of(
        {name: (v, P if name in withheld else U) for name, v in figures.items()},
        [("r1", ["x11", "x12"]), ("r2", ["x21", "x22"]), ("c1", ["x11", "x21"]), ("c2", ["x12", "x22"])],
    )
    least = brute_lower_bounds(table, ["x11", "x12", "x21", "x22"], cap=sum(values) + 1)
    expected = {i for i, lo in least.items() if lo == 1}
    assert set(figures_at_lower_bound_one(table, k=5).at_one) == expected


def _two_way(values, withheld, suffix: str = ""):
    x11, x12, x21, x22 = values
    figures = {"x11": x11, "x12": x12, "x21": x21, "x22": x22}
    figures |= {"r1": x11 + x12, "r2": x21 + x22, "c1": x11 + x21, "c2": x12 + x22}
    nodes = {name + suffix: (v, P if name in withheld else U) for name, v in figures.items()}
    relations = [(p + suffix, [c + suffix for c in cs]) for p, cs in RECTANGLE]
    return nodes, relations


RECTANGLE = [("r1", ["x11", "x12"]), ("r2", ["x21", "x22"]), ("c1", ["x11", "x21"]), ("c2", ["x12", "x22"])]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tables=st.lists(
        st.tuples(
            st.lists(st.integers(0, 3), min_size=4, max_size=4),
            st.sets(st.sampled_from(["x11", "x12", "x21", "x22", "r1", "c1"]), min_size=1, max_size=4),
        ),
        min_size=2,
        max_size=8,
    )
)
def test_components_solved_together_find_what_each_alone_finds(tables):
    """Many small components in one table are solved as one packed model (their disjoint union): the figures at
    1 are exactly those brute force finds in each component on its own."""
    nodes: dict[str, tuple[int, str]] = {}
    relations, expected = [], set()
    for i, (values, withheld) in enumerate(tables):
        own_nodes, own_relations = _two_way(values, withheld, f"_{i}")
        nodes |= own_nodes
        relations += own_relations
        alone = table_of(*_two_way(values, withheld))
        least = brute_lower_bounds(alone, ["x11", "x12", "x21", "x22"], cap=sum(values) + 1)
        expected |= {f"{alone.area[n]}_{i}" for n, lo in least.items() if lo == 1}
    table = table_of(nodes, relations)
    found = figures_at_lower_bound_one(table, k=5)
    assert not found.errors
    assert names(table, found.at_one) == expected
