"""The attacker-LP audit: negative controls that must fail, positive controls that must pass, and a
property test against brute-force enumeration of the integer solutions."""

import itertools
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tables import table_of

from spatial_release.suppression.audit import audit
from spatial_release.suppression.complementary import SuppressionError
from spatial_release.suppression.method import ProtectionMethod
from spatial_release.suppression.protection import protect
from spatial_release.suppression.release_system import DisclosureSpec, Structure, system_for
from spatial_release.suppression.table import (
    EQ,
    PRIMARY,
    PUBLISHED,
    SECONDARY,
    UNION,
    Relation,
    Table,
    zones_chain,
)

P, S, U = PRIMARY, SECONDARY, PUBLISHED


def intervals(result) -> dict:
    return {i.node: (i.lo, i.up) for i in result.intervals}


# The constraint sweep without pruning, which these tests were written for (the default is the release method)
SWEEP = ProtectionMethod.sweep()
RECT = [("r1", ["x11", "x12"]), ("r2", ["x21", "x22"]), ("c1", ["x11", "x21"]), ("c2", ["x12", "x22"])]


def rectangle(x11, x12, x21, x22, statuses) -> Table:
    values = {"x11": x11, "x12": x12, "x21": x21, "x22": x22}
    nodes = {"r1": (x11 + x12, U), "r2": (x21 + x22, U), "c1": (x11 + x21, U), "c2": (x12 + x22, U)}
    nodes.update({name: (v, statuses.get(name, U)) for name, v in values.items()})
    return table_of(nodes, RECT)


# ---- negative controls: each must fail ------------------------------------------------------------


def test_n1_lone_primary_with_all_totals_published():
    result = audit(table_of({"T": (10, U), "a": (2, P), "b": (8, U)}, [("T", ["a", "b"])]), k=5)
    assert not result.passed and list(intervals(result).values()) == [(2.0, 2.0)]


def test_n2_two_primaries_below_k_protecting_only_each_other():
    table = table_of({"T": (12, U), "a": (2, P), "b": (1, P), "c": (9, U)}, [("T", ["a", "b", "c"])])
    result = audit(table, k=5)
    assert not result.passed and all(up == 3 for _, up in intervals(result).values())  # the sum 3 < k shows
    assert audit(table, k=3).passed  # the same pattern is safe when the sum reaches k


def test_n3_rectangle_whose_partner_cell_is_empty():
    table = rectangle(2, 5, 7, 0, {"x11": P, "x12": S, "x21": S, "x22": S})
    result = audit(table, k=3)
    assert not result.passed and intervals(result)[table.index[("x", "x11", 0)]][0] == 2  # lo pinned at v


def test_n4_published_total_altered_by_one_is_an_error_not_a_pass():
    table = rectangle(2, 5, 7, 3, {"x11": P, "x12": S, "x21": S, "x22": S})
    assert audit(table, k=3).passed
    table.value[table.index[("x", "r1", 0)]] += 1
    result = audit(table, k=3)
    assert not result.passed and any("infeasible" in e for e in result.errors)


def test_n4_inconsistent_fully_published_relation():
    table = table_of({"T": (11, U), "a": (2, P), "b": (8, U), "c": (4, U), "d": (5, U)}, [("T", ["a", "b"]), ("c", ["d"])])
    result = audit(table, k=3)
    assert not result.passed and any("contradicts" in e for e in result.errors)


def test_n5_parent_with_a_single_child():
    # a district made of one cell: withholding the cell alone leaves it equal to the published district
    table = table_of(
        {"T": (13, U), "D1": (3, U), "D2": (10, U), "a": (3, P), "b": (6, U), "c": (4, U)},
        [("T", ["D1", "D2"]), ("D1", ["a"]), ("D2", ["b", "c"])],
    )
    result = audit(table, k=5)
    assert not result.passed and list(intervals(result).values()) == [(3.0, 3.0)]


def _district_table(with_districts: bool) -> Table:
    # bucket total T = a + b + c + d; districts D1 = a + b, D2 = c + d. The pattern {a, c} is a valid
    # "pair" against the total alone, but D1 published pins a.
    nodes = {"T": (20, U), "D1": (9, U), "D2": (11, U), "a": (2, P), "b": (7, U), "c": (6, S), "d": (5, U)}
    relations = [("T", ["a", "b", "c", "d"])]
    if with_districts:
        relations += [("D1", ["a", "b"]), ("D2", ["c", "d"])]
    return table_of(nodes, relations)


def test_n6_pattern_safe_against_leaves_but_not_the_district_level():
    assert audit(_district_table(with_districts=False), k=5).passed
    result = audit(_district_table(with_districts=True), k=5)
    assert not result.passed and list(intervals(result).values()) == [(2.0, 2.0)]


def _two_zonings(with_second: bool) -> Table:
    # zoning A: T = a1 + a2 with a1 primary, a2 published and the total T withheld: a1 is free.
    # zoning B over the same units: T = b1 + b2, both published, so T and then a1 are known.
    nodes = {"T": (11, S), "a1": (2, P), "a2": (9, U), "b1": (5, U), "b2": (6, U)}
    relations = [("T", ["a1", "a2"])] + ([("T", ["b1", "b2"])] if with_second else [])
    return table_of(nodes, relations)


def test_n7_second_zoning_differences_a_cell_out():
    assert audit(_two_zonings(with_second=False), k=5).passed
    result = audit(_two_zonings(with_second=True), k=5)
    assert not result.passed and list(intervals(result).values()) == [(2.0, 2.0)]


def test_n7_earlier_release_differences_a_cell_out():
    table = table_of({"T": (12, U), "a": (2, P), "b": (3, S), "c": (7, U)}, [("T", ["a", "b", "c"])])
    assert audit(table, k=5).passed
    table.status[table.index[("x", "b", 0)]] = U  # an earlier release of the period published b
    assert not audit(table, k=5).passed


def odd_cycle(others: str) -> Table:
    """Relations forming an odd cycle (not totally unimodular) around the primary x0 = 2; the other cells
    have status `others`. Found by a random search of small systems against integer enumeration."""
    nodes = {f"x{i}": (v, others) for i, v in enumerate([2, 4, 2, 4, 2])}
    nodes["x0"] = (2, P)
    nodes.update({"R1": (8, U), "R2": (8, U), "R3": (8, U), "R4": (6, U)})
    return table_of(
        nodes, [("R1", ["x1", "x3"]), ("R2", ["x4", "x1", "x0"]), ("R3", ["x2", "x3", "x0"]), ("R4", ["x1", "x2"])]
    )


def test_n8_only_integer_rounding_discloses():
    # the LP optimum for x0 is 10/3 at a fractional vertex, so the LP alone would report up = 3 >= k = 3;
    # the integer maximum is 2 = v
    table = odd_cycle(others=S)
    result = audit(table, k=3)
    [interval] = result.intervals
    assert interval.exact_integer and result.mips_solved >= 1
    assert interval.up == 2 and not result.passed


def test_n9_removing_any_necessary_secondary_fails():
    statuses = {"x11": P, "x12": S, "x21": S, "x22": S}
    assert audit(rectangle(2, 5, 7, 3, statuses), k=3).passed
    for secondary in ("x12", "x21", "x22"):
        assert not audit(rectangle(2, 5, 7, 3, {**statuses, secondary: U}), k=3).passed, secondary


@pytest.mark.parametrize(
    "options", [{"time_limit": 0.0}, {"simplex_iteration_limit": 0}, {"presolve": "off", "simplex_iteration_limit": 0}]
)
def test_n10_forced_solver_failure_is_an_error(options):
    # optimal bounds: every bound is an LP solve (with presolve, HiGHS may finish a tiny witness LP before any
    # limit applies, and a witness that was found is a valid one)
    table = rectangle(2, 5, 7, 3, {"x11": P, "x12": S, "x21": S, "x22": S})
    result = audit(table, k=3, options=options, optimal_bounds=True)
    assert not result.passed and result.errors and "solver status" in result.errors[0]


def test_union_relations_for_visitors():
    # visitors: max(children) <= parent <= sum(children). Parent 5 with children 5 (published) and a
    # withheld 2: the attacker only knows 0 <= a <= 5, so a primary of 2 keeps [0, 5] with k = 5.
    table = table_of({"D": (5, U), "a": (2, P), "b": (5, U)}, [("D", ["a", "b"])], kind=UNION)
    result = audit(table, k=5, optimal_bounds=True)
    assert result.passed and list(intervals(result).values()) == [(0.0, 5.0)]
    # publishing a parent that equals the sum pins nothing under UNION, but a parent of 2 with b = 0...
    pinned = table_of({"D": (2, U), "a": (2, P), "b": (1, U)}, [("D", ["a", "b"])], kind=UNION)
    assert not audit(pinned, k=5).passed  # up = 2: shown below k


def test_n11_absent_listed_zero_is_known_to_hold_a_unit():
    """A listed structural zero that is absent from the release is, to an outsider, at least 1 (a
    listed zero that holds no unit is published as 0). Two ones protecting each other pass with the
    default lower bound 0 and fail once the absent listed zero carries lower bound 1: it is [1, 2], and
    its partner is [0, 1], shown below k = 2. The default (witness) audit must respect the bound too."""
    table = table_of({"T": (2, U), "a": (1, P), "b": (1, P)}, [("T", ["a", "b"])])
    assert audit(table, k=2).passed  # the old modelling: every withheld figure >= 0
    table.floor[table.index[("x", "a", 0)]] = 1
    for optimal in (False, True):
        result = audit(table, k=2, optimal_bounds=optimal)
        assert not result.passed, optimal
        if optimal:
            assert list(intervals(result).values()) == [(1.0, 2.0), (0.0, 1.0)]
        assert {i.failing for i in result.failures()} == {"lower", "upper"}, optimal


# ---- positive controls --------------------------------------------------------------------------


def test_p1_rectangle_with_enough_mass_passes():
    table = rectangle(2, 5, 7, 3, {"x11": P, "x12": S, "x21": S, "x22": S})
    result = audit(table, k=3, optimal_bounds=True)
    assert result.passed and result.components == 1 and result.lps_solved == 2
    assert list(intervals(result).values()) == [(0.0, 7.0)]  # x11 ranges over [0, r1]
    fast = audit(table, k=3)
    assert fast.passed and fast.bulk_lps >= 1 and fast.intervals[0].bounds == "witness"


def test_p2_two_ones_with_absent_empty_cells_pass_for_k_2():
    table = table_of({"T": (2, U), "a": (1, P), "b": (1, P)}, [("T", ["a", "b"])])
    assert audit(table, k=2).passed


def test_protect_repairs_failing_patterns_and_is_deterministic():
    def build():
        return _district_table(with_districts=True)

    first, second = build(), build()
    first.status[first.index[("x", "c", 0)]] = U  # let the suppressor choose
    second.status[second.index[("x", "c", 0)]] = U
    log = protect(first, k=5, level_depth={}, method=SWEEP)
    protect(second, k=5, level_depth={}, method=SWEEP)
    assert first.status == second.status and log.audit is not None and log.audit.passed
    assert audit(first, k=5).passed  # an independent re-audit agrees
    assert first.status[first.index[("x", "T", 0)]] == U  # the total is the most expensive: kept


def test_protect_repair_loop_is_exercised():
    # the sweep sees only one relation at a time; the odd cycle needs the LP repair to find the binding cell
    table = odd_cycle(others=U)
    log = protect(table, k=3, level_depth={}, method=SWEEP)
    assert log.audit is not None and log.audit.passed and audit(table, k=3).passed
    assert log.repair_secondaries >= 1 and log.rounds >= 1


def test_protect_climbs_single_child_chains_to_the_top():
    # a cell alone in its district, alone in the total: only withholding the whole chain protects it
    table = table_of({"T": (2, U), "D": (2, U), "a": (2, P)}, [("T", ["D"]), ("D", ["a"])])
    log = protect(table, k=5, level_depth={}, method=SWEEP)
    assert log.audit is not None and log.audit.passed and table.status == [S, S, P]


def test_protect_turns_solver_failure_into_an_error():
    table = table_of({"T": (12, U), "a": (2, P), "b": (10, U)}, [("T", ["a", "b"])])
    with pytest.raises(SuppressionError, match="solver status"):
        protect(table, k=5, level_depth={}, method=SWEEP, options={"simplex_iteration_limit": 0, "presolve": "off"})


# ---- property test: the audit equals brute-force integer enumeration ------------------------------

BUCKET = datetime(2018, 1, 1, tzinfo=UTC)
LEAVES = ["a1", "a2", "b1", "b2", "b3"]
HIERARCHY = pd.DataFrame({"cell_id": LEAVES, "district": ["A", "A", "B", "B", "B"]})
CAP = 16  # values are at most 3, so any feasible finite bound is below 16; reaching it means unbounded


def _brute_force(values: dict, known_leaves: set, known_margins: dict) -> dict:
    unknown = [leaf for leaf in LEAVES if leaf not in known_leaves]
    grids = (
        np.array(list(itertools.product(range(CAP + 1), repeat=len(unknown))), dtype=np.int64)
        if unknown
        else np.zeros((1, 0), dtype=np.int64)
    )
    columns = {leaf: grids[:, j] for j, leaf in enumerate(unknown)}
    columns.update({leaf: np.full(len(grids), values[leaf]) for leaf in known_leaves})
    sums = {"A": columns["a1"] + columns["a2"], "B": columns["b1"] + columns["b2"] + columns["b3"]}
    sums["total"] = sums["A"] + sums["B"]
    ok = np.ones(len(grids), dtype=bool)
    for name, value in known_margins.items():
        ok &= sums[name] == value
    feasible = {leaf: columns[leaf][ok] for leaf in LEAVES}
    feasible.update({name: sums[name][ok] for name in sums})
    return feasible


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.integers(0, 3), min_size=5, max_size=5),
    k=st.integers(2, 4),
    publish=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_audit_matches_brute_force(values, k, publish):
    values = dict(zip(LEAVES, values))
    margins = {"A": values["a1"] + values["a2"], "B": values["b1"] + values["b2"] + values["b3"]}
    margins["total"] = margins["A"] + margins["B"]
    leaves = pd.DataFrame(
        {
            "area_id": [leaf for leaf in LEAVES if values[leaf] > 0],
            "bucket_start": BUCKET,
            "n": [values[leaf] for leaf in LEAVES if values[leaf] > 0],
        }
    )
    margin_rows = pd.DataFrame(
        [
            {"level": "district" if a != "total" else "total", "area_id": a, "bucket_start": BUCKET, "n": n}
            for a, n in margins.items()
            if n > 0
        ]
    )
    if margin_rows.empty:
        return
    structure = Structure((zones_chain("cell", HIERARCHY, ["district"]),))
    table = system_for(leaves.rename(columns={"area_id": "cell_id"}), margin_rows, DisclosureSpec(structure, k, "presence"))
    # a random pattern over the non-primary figures; primaries are always withheld
    names = [*LEAVES, "A", "B", "total"]
    for flag, name in zip(publish, names):
        level = "cell" if name in LEAVES else ("total" if name == "total" else "district")
        node = table.index.get((level, name, BUCKET))
        if node is not None and table.status[node] == PUBLISHED and not flag:
            table.status[node] = SECONDARY
    known_leaves = {
        leaf
        for leaf in LEAVES
        if (n := table.index.get(("cell", leaf, BUCKET))) is not None and table.status[n] == PUBLISHED
    }
    known_margins = {
        a: margins[a]
        for a in ("A", "B", "total")
        if (n := table.index.get(("total" if a == "total" else "district", a, BUCKET))) is not None
        and table.status[n] == PUBLISHED
    }
    result = audit(table, k, optimal_bounds=True)
    fast = {i.node: i for i in audit(table, k).intervals}
    assert not result.errors
    feasible = _brute_force(values, known_leaves, known_margins)
    for interval in result.intervals:
        name = table.area[interval.node]
        lo, up = int(feasible[name].min()), int(feasible[name].max())
        assert interval.lo == lo, name
        assert (interval.up == float("inf")) == (up >= CAP), name
        if up < CAP:
            assert interval.up == up, name
        # the witness audit reaches the same verdict, and its bounds lie inside the true interval
        witness = fast[interval.node]
        assert witness.passed == interval.passed, name
        assert lo <= witness.lo and (witness.up <= up or up >= CAP), name


def test_pruning_gives_back_unneeded_secondaries_and_keeps_the_audit_passing():
    plain, pruned = odd_cycle(others=U), odd_cycle(others=U)
    protect(plain, k=3, level_depth={}, method=SWEEP)
    log = protect(pruned, k=3, level_depth={}, method=SWEEP.with_prune_tries(50))
    assert log.audit is not None and log.audit.passed and audit(pruned, k=3, optimal_bounds=True).passed
    assert len(pruned.secondaries()) == len(plain.secondaries()) - log.pruned
    assert log.pruned >= 1  # the repair rounds over-withheld on this table


def test_a_failing_witness_solve_falls_back_to_an_error():
    table = rectangle(2, 5, 7, 3, {"x11": P, "x12": S, "x21": S, "x22": S})
    result = audit(table, k=3, options={"presolve": "off", "simplex_iteration_limit": 0})
    assert not result.passed and "solver status" in result.errors[0]


def test_tau_compatibility_criterion_is_weaker_than_ours():
    """tau-Argus FREQ(k, p) only asks that a value is not pinned within p%; ours also asks that it is not
    shown below k. The sum-below-k pattern passes the former and fails ours."""
    from spatial_release.suppression.audit import Criterion

    table = table_of({"T": (12, U), "a": (2, P), "b": (1, P), "c": (9, U)}, [("T", ["a", "b", "c"])])
    assert audit(table, k=5, criterion=Criterion(5, range_pct=10)).passed
    assert not audit(table, k=5).passed
    assert Criterion(5, 10).upper(2) == 3 and Criterion(5).upper(2) == 5 and Criterion(5, 10).lower(1) == 0


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.booleans(), min_size=n, max_size=n),
            st.lists(
                st.tuples(
                    st.integers(0, n - 1),
                    st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True),
                    st.one_of(st.none(), st.integers(0, n - 1)),
                ),
                max_size=25,
            ),
        )
    )
)
def test_components_are_the_connected_withheld_nodes_in_order(case):
    """audit.components (union by minimum label in arrays) against a breadth-first search over the withheld
    members of each relation: the same components, ordered by smallest node, nodes ascending."""
    from spatial_release.suppression.audit import components
    from spatial_release.suppression.table import PRIMARY, PUBLISHED, Table

    n, withheld, relations = case
    table = Table(
        level=["cell"] * n,
        area=[f"a{i}" for i in range(n)],
        bucket=[0] * n,
        value=[1] * n,
        status=[PRIMARY if w else PUBLISHED for w in withheld],
    )
    for parent, children, rest in relations:
        table.relations.append(Relation(EQ, parent, tuple(c for c in children if c != parent), rest))
    neighbours: dict[int, set[int]] = {i: set() for i in range(n) if withheld[i]}
    for relation in table.relations:
        hidden = [m for m in relation.members() if withheld[m]]
        for a, b in itertools.combinations(hidden, 2):
            neighbours[a].add(b)
            neighbours[b].add(a)
    expected, seen = [], set()
    for start in sorted(neighbours):
        if start in seen:
            continue
        group, frontier = {start}, [start]
        while frontier:
            for other in neighbours[frontier.pop()] - group:
                group.add(other)
                frontier.append(other)
        seen |= group
        expected.append(sorted(group))
    assert components(table) == expected


def test_progress_events_carry_their_step_and_a_sub_step_drops_only_its_closing_event():
    from spatial_release.progress import ProgressEvent, without_closing

    table = rectangle(2, 5, 7, 3, {"x11": P, "x12": S, "x21": S, "x22": S})
    events: list[str] = []
    audit(table, k=3, progress=events.append, every_s=0.0)
    assert events and all(isinstance(e, ProgressEvent) and e.step == "audit" for e in events)
    closing = [e for e in events if isinstance(e, ProgressEvent) and e.done]
    assert len(closing) == 1 and closing[0] == events[-1] and closing[0].share == 1.0
    assert "every withheld primary protected" in closing[0]  # the text is unchanged for a reader of logs

    outer: list[str] = []
    audit(table, k=3, progress=without_closing(outer.append, "audit"), every_s=0.0)
    assert len(outer) == len(events) - 1 and not any(isinstance(e, ProgressEvent) and e.done for e in outer)
    # another step's closing event, and plain text, pass through
    forward = without_closing(outer.append, "audit")
    forward(ProgressEvent("suppression", "suppression: done", done=True))
    forward("plain text")
    assert outer[-2:] == ["suppression: done", "plain text"]
