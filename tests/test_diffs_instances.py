"""i-diff instances (thesis §2.12.1): the thesis' examples in its notation and in JSON, the JSON
Schema, the notation's errors, application, effectiveness (§2.2) and condensation.

The examples are transcribed by hand in ``goldens/diffs/thesis/``.  The text extraction of
the thesis garbles a few brackets there; the transcriptions fix only those: Δ^V of §2.9 has
a stray ``}`` before the closing ``>`` of ``#() <``, so it is written with ``{ }``; Δ₃ of
Example 2.12.2 lacks the braces closing ``full_reviews`` and its tuple diff.  Δ₂ and Δ₃ keep
the thesis' ``#() < ... >`` typesetting, which the parser accepts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idivm.diffs import (
    ABSENT,
    BagDiff,
    DiffType,
    FrozenBag,
    FrozenTuple,
    IDiff,
    NamedDiff,
    Provenance,
    TupleDiff,
    format_idiff,
    format_value,
    parse_idiff,
    parse_value,
    thaw,
)
from idivm.diffs.model import (
    KeyedBag,
    Reinsertion,
    apply_bag_diff,
    apply_idiff,
    check_effective,
    condense,
    dumps_idiff,
    effectiveness_violations,
    idiff_from_json,
    idiff_schema,
    idiff_to_json,
    is_effective,
    loads_idiff,
    validate_idiff_json,
)
from idivm.errors import DataError, SqlppSyntaxError

GOLDENS = Path(__file__).parent / "goldens" / "diffs"
THESIS = GOLDENS / "thesis"

EXAMPLES = {
    "example_2_9_1_delta_b": "Δ^b of §2.9: a base table i-diff updating an elite year of a user",
    "example_2_9_1_delta_v": "Δ^V of §2.9: the view i-diff it becomes, with partial provenance #()",
    "example_2_12_1_delta_2": "Δ₂^V of Example 2.12.1: deletes a review of user U4n7",
    "example_2_12_2_delta_3": "Δ₃^V of Example 2.12.2: a delete and an update in one bag diff",
    "example_2_14_2_businesses": "Example 2.14.2: a business moves from San Francisco to Palo Alto",
    "example_2_14_2_users": "Example 2.14.2: an elite year is inserted for a user",
}


def thesis_instance(name: str):
    path = THESIS / f"{name}.idiff"
    return parse_idiff(path.read_text(), str(path))


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDENS / name
    if update:
        path.write_text(text)
        return
    assert path.exists(), f"missing golden {path}; run pytest --update-goldens and review it"
    assert text == path.read_text(), f"{path} differs; run pytest --update-goldens and review the diff"


# ----------------------------------------------------------------------------- thesis examples


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_thesis_example_parses_validates_prints_and_round_trips(name, update_goldens):
    instance = thesis_instance(name)
    data = idiff_to_json(instance)
    validate_idiff_json(data)
    printed = format_idiff(instance)
    assert str(instance) == printed
    check_golden(f"{name}.txt", printed + "\n", update_goldens)
    check_golden(f"{name}.json", json.dumps(data, indent=2) + "\n", update_goldens)
    # notation → model → JSON → model → notation
    again = idiff_from_json(json.loads(json.dumps(data)))
    assert again == instance
    assert format_idiff(again) == printed
    assert parse_idiff(printed) == instance
    assert loads_idiff(dumps_idiff(instance)) == instance


def test_example_2_9_1_delta_b_is_the_model_built_by_hand():
    expected = NamedDiff("users", IDiff.update(diff=BagDiff((
        IDiff.update({"uid": "Ha3i"}, diff=TupleDiff({
            "elite": IDiff.update(diff=BagDiff((IDiff.update({"eid": "9kjb"}, post=2014),))),
        })),
    ))))
    assert thesis_instance("example_2_9_1_delta_b") == expected


def test_example_2_9_1_delta_v_has_unconstrained_root_provenance():
    delta_v = thesis_instance("example_2_9_1_delta_v")
    assert isinstance(delta_v, BagDiff) and len(delta_v) == 1
    root = delta_v[0]
    assert root.provenance == Provenance() and str(root.provenance) == "#()"
    reviews = root.diff["full_reviews"]
    assert reviews.type is DiffType.UPDATE and isinstance(reviews.diff, BagDiff)
    assert reviews.diff[0].provenance == Provenance.of(uid="Ha3i")
    # the elite update of Δ^b is carried unchanged under full_reviews
    delta_b = thesis_instance("example_2_9_1_delta_b")
    assert reviews.diff[0] == delta_b.idiff.diff[0]


def test_example_2_14_2_carries_pre_and_post_of_the_conditional_attribute():
    city = thesis_instance("example_2_14_2_businesses").idiff.diff[0].diff["city"]
    assert (city.type, city.pre, city.post) == (DiffType.UPDATE, "San Francisco", "Palo Alto")
    assert "pre: 'San Francisco'" in format_idiff(thesis_instance("example_2_14_2_businesses"))


def test_thesis_angle_typesetting_reads_as_braces():
    angle = parse_idiff("{{ #() < type: update, post: 1 > }}")
    assert angle == parse_idiff("{{ #() { type: update, post: 1 } }}")


def test_schema_ships_with_the_package():
    schema = idiff_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert {"idiff", "element", "attribute", "bagDiff", "tupleDiff", "namedDiff"} <= set(schema["$defs"])


# ----------------------------------------------------------------------------- JSON Schema


@pytest.mark.parametrize("data, message", [
    ({"type": "update", "diff": [{"provenance": {"uid": "a"}, "type": "upsert", "post": 1}]},
     "$.diff[0].type: 'upsert' is not one of ['insert', 'delete', 'update']"),
    ({"type": "insert", "pre": 1, "post": 2},
     "$.pre: an insert i-diff has no pre: the value did not exist before"),
    ({"type": "insert"}, "$: 'post' is a required property"),
    ({"type": "delete", "post": 3}, "$.post: a delete i-diff has no post: the value does not exist after"),
    ({"type": "delete", "diff": {}}, "$.diff: a delete i-diff has no nested diff: the whole value is deleted"),
    ({"type": "update"}, "$: an update i-diff needs 'post' or 'diff'"),
    ([{"type": "delete"}], "$[0]: 'provenance' is a required property"),
    ({"type": "update", "diff": {"city": {"provenance": {"x": 1}, "type": "update", "post": "x"}}},
     "$.diff.city.provenance: the i-diff of a tuple attribute has no provenance: its name identifies it"),
    ({"type": "update", "diff": {"city": {"type": "update", "post": "x", "old": "y"}}},
     "$.diff.city: Additional properties are not allowed ('old' was unexpected)"),
    ({"name": "users", "idiff": {"type": "update", "diff": [{"provenance": {"uid": [1]}, "type": "delete"}]}},
     "$.idiff.diff[0].provenance.uid: [1] is not of type 'string', 'number', 'boolean', 'null'"),
    ({"name": "users"}, "$: 'idiff' is a required property"),
    ({"type": "update", "diff": [{"provenance": {}, "type": "update",
                                  "diff": {"elite": {"type": "update", "diff": [{"type": "insert", "post": 1}]}}}]},
     "$.diff[0].diff.elite.diff[0]: 'provenance' is a required property"),
    ("update", "$: 'update' is not of type 'object'"),
])
def test_schema_rejects_malformed_idiffs_naming_the_path(data, message):
    with pytest.raises(DataError) as e:
        idiff_from_json(data)
    assert e.value.one_line() == message


def test_loads_rejects_bad_json_text():
    with pytest.raises(DataError, match="duplicate key 'type'"):
        loads_idiff('{"type": "update", "type": "delete"}')
    with pytest.raises(DataError, match="NaN is not a JSON number"):
        loads_idiff('{"type": "update", "post": NaN}')
    with pytest.raises(DataError) as e:
        loads_idiff('{"type": "update",\n "post": }')
    assert e.value.one_line().startswith("2:10: invalid JSON")


def test_json_keeps_null_apart_from_absent():
    node = IDiff.update({"k": 1}, pre=None, post=0)
    assert idiff_to_json(node) == {"provenance": {"k": 1}, "type": "update", "pre": None, "post": 0}
    assert IDiff.update({"k": 1}, post=0).pre is ABSENT
    assert idiff_from_json(idiff_to_json(node)) == node


# ----------------------------------------------------------------------------- notation


@pytest.mark.parametrize("text, error, message", [
    ("{ type: upsert, post: 1 }", DataError, "1:3: type: 'upsert' is not one of ['insert', 'delete', 'update']"),
    ("{ type: update post: 1 }", SqlppSyntaxError, "1:16: unexpected 'post'; expected one of ',', '}'"),
    ("{ type: update, diff: { a: { tpye: update } } }", SqlppSyntaxError,
     "1:30: unexpected 'tpye'; expected one of 'diff', 'post', 'pre', 'type'"),
    ("{{ { type: delete } }}", DataError, "1:4: an element of a bag diff needs its provenance #(...) (§2.12.1)"),
    ("{ type: insert, pre: 1, post: 2 }", DataError,
     "1:1: an insert i-diff has no pre: the value did not exist before (§2.12.1)"),
    ("{ type: update, post: 1, post: 2 }", DataError, "1:26: duplicate 'post' in an i-diff"),
    ("{ post: 1 }", DataError, "1:1: an i-diff needs a type (insert, delete or update)"),
    ("{ type: update,\n  diff: { city: #(x=1) { type: update, post: 1 } } }", DataError,
     "2:17: the i-diff of attribute 'city' has no provenance: its name identifies it (§2.12.1)"),
    ("<users: #(uid=1) { type: delete }>", DataError, "1:9: the i-diff of 'users' has no provenance: its name identifies it"),
    ("{{ #(uid=1, uid=2) { type: delete } }}", DataError, "1:13: duplicate provenance key 'uid'"),
    ("{ type: update, post: {a: 1, a: 2} }", DataError, "1:30: duplicate attribute 'a' in a tuple"),
    ("{ type: update, post: 'unterminated }", SqlppSyntaxError, "1:23: unexpected character \"'\"; expected one of "
                                                                 "'false', 'null', 'true', '{', a number, a string"),
    ("{ type: update,\n  post: 1", SqlppSyntaxError, "2:10: unexpected end of input; expected one of ',', '}'"),
    ("{ type: update, post: 'a\\qb' }", SqlppSyntaxError, "1:23: unknown escape sequence '\\q'"),
])
def test_notation_errors_are_one_line_with_line_and_column(text, error, message):
    with pytest.raises(error) as e:
        parse_idiff(text)
    assert e.value.one_line() == message
    assert e.value.excerpt()  # the source line and a caret, for the CLI


def test_notation_error_names_the_file():
    with pytest.raises(DataError) as e:
        parse_idiff("{ type: upsert, post: 1 }", "feed.idiff")
    assert e.value.one_line().startswith("feed.idiff:1:3: ")


@pytest.mark.parametrize("text, value", [
    ("'San Francisco'", "San Francisco"),
    ('"it\'s"', "it's"),
    ("'a\\'b\\\\c\\n\\u00e9'", "a'b\\c\né"),
    ("2014", 2014),
    ("-1.5e3", -1500.0),
    ("true", True),
    ("null", None),
    ("{ name: 'Ha3i', fans: 3 }", {"name": "Ha3i", "fans": 3}),
    ("{{ 2014, 2015 }}", [2014, 2015]),
    ("{{ }}", []),
    ("{ }", {}),
    ("{{ { a: 1 }, {{ }} }}", [{"a": 1}, []]),
    ("{ 'odd name': 1, type: 2 }", {"odd name": 1, "type": 2}),
])
def test_values_parse_and_print_back(text, value):
    parsed = parse_value(text)
    assert parsed == value
    assert parse_value(format_value(parsed)) == parsed


def test_bags_print_with_double_braces_and_compare_as_multisets():
    bag = parse_value("{{ 1, 2, 2 }}")
    assert isinstance(bag, FrozenBag) and format_value(bag) == "{{ 1, 2, 2 }}"
    assert bag == [2, 1, 2] and bag != [1, 2]
    assert parse_value("{ a: true }") != {"a": 1}  # booleans are not numbers


@pytest.mark.parametrize("text, pairs", [
    ("#(uid=Ha3i)", {"uid": "Ha3i"}),
    ("#(eid=9kjb)", {"eid": "9kjb"}),
    ("#(n=12, x=-0.5, b=true, z=null)", {"n": 12, "x": -0.5, "b": True, "z": None}),
    ("#(s='12', t='San Francisco', u='true')", {"s": "12", "t": "San Francisco", "u": "true"}),
    ("#()", {}),
])
def test_provenance_values_bare_or_quoted(text, pairs):
    node = parse_idiff(f"{text} {{ type: delete }}")
    assert dict(node.provenance) == pairs
    assert parse_idiff(format_idiff(node)) == node
    assert format_idiff(node).startswith(text.replace("'true'", "'true'"))


def test_provenance_is_a_set_of_pairs():
    a, b = Provenance.of(uid="u", rid="r"), Provenance.of(rid="r", uid="u")
    assert a == b and hash(a) == hash(b) and str(a) == "#(uid=u, rid=r)"
    assert Provenance.of(uid="u").matches(a) and Provenance().matches(a)
    assert not a.matches(Provenance.of(uid="u"))
    assert Provenance.of(k=1) != Provenance.of(k=True)


# ----------------------------------------------------------------------------- model validation


@pytest.mark.parametrize("build, message", [
    (lambda: IDiff("insert", post=1, pre=0), "an insert i-diff has no pre"),
    (lambda: IDiff("insert"), "an insert i-diff needs the post-state"),
    (lambda: IDiff("delete", post=1), "a delete i-diff has no post"),
    (lambda: IDiff("update"), "an update i-diff needs a post-state or a nested diff"),
    (lambda: IDiff("upsert", post=1), "'upsert' is not one of"),
    (lambda: IDiff("update", post=float("nan")), "post: nan is not a finite number"),
    (lambda: IDiff("update", post={"a": {1, 2}}), "post.a: expected a scalar"),
    (lambda: BagDiff((IDiff.delete(),)), "element 0 of a bag diff needs its provenance"),
    (lambda: TupleDiff({"a": IDiff.delete({"k": 1})}), "the i-diff of attribute 'a' has no provenance"),
    (lambda: NamedDiff("users", IDiff.delete({"k": 1})), "has no provenance: its name identifies it"),
    (lambda: Provenance.of({"k": [1]}), "expected a scalar"),
    (lambda: IDiff.insert(KeyedBag({Provenance.of(t=1): 1})), "i-diff values are plain JSON-like values"),
])
def test_model_validates_on_construction(build, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build()


def test_model_is_immutable_and_hashable():
    node = IDiff.update({"k": 1}, post={"a": [1, 2]})
    assert isinstance(node.post, FrozenTuple) and isinstance(node.post["a"], FrozenBag)
    with pytest.raises(TypeError):
        node.post["b"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        node.post.x = 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        node.type = DiffType.DELETE  # type: ignore[misc]
    assert len({node, IDiff.update({"k": 1}, post={"a": [2, 1]})}) == 1


# ----------------------------------------------------------------------------- application


def users_pre_state() -> KeyedBag:
    return KeyedBag({
        Provenance.of(uid="Ha3i"): {"user_id": "Ha3i", "fans": 3,
                                     "elite": KeyedBag({Provenance.of(eid="9kjb"): 2013,
                                                        Provenance.of(eid="x2"): 2012})},
        Provenance.of(uid="U4n7"): {"user_id": "U4n7", "fans": 0, "elite": KeyedBag()},
    })


def test_apply_example_2_9_1_delta_b():
    after = apply_idiff({"users": users_pre_state()}, thesis_instance("example_2_9_1_delta_b"))["users"]
    elite = after[Provenance.of(uid="Ha3i")]["elite"]
    assert elite == KeyedBag({Provenance.of(eid="9kjb"): 2014, Provenance.of(eid="x2"): 2012})
    assert after[Provenance.of(uid="U4n7")] == users_pre_state()[Provenance.of(uid="U4n7")]


def test_partial_provenance_applies_to_every_match():
    view = KeyedBag({Provenance.of(bid=b): {"business_id": b, "n": 0} for b in ("b1", "b2")})
    after = apply_bag_diff(view, parse_idiff("{{ #() { type: update, diff: { n: { type: update, post: 7 } } } }}"))
    assert [v["n"] for v in after.values()] == [7, 7]
    assert apply_bag_diff(view, parse_idiff("{{ #() { type: delete } }}")) == KeyedBag()


def test_insert_of_a_taken_provenance_is_a_key_violation():
    bag = KeyedBag({Provenance.of(k=1): "a"})
    assert apply_bag_diff(bag, [IDiff.insert("a", {"k": 1})]) == bag  # same value: nothing to do (§2.2)
    with pytest.raises(DataError, match="key violation"):
        apply_bag_diff(bag, [IDiff.insert("b", {"k": 1})])


# ----------------------------------------------------------------------------- effectiveness


def business(city: str) -> dict:
    return {"business_id": "tnhf", "city": city}


BUSINESSES_PRE = KeyedBag({Provenance.of(bid="tnhf"): business("San Francisco"),
                           Provenance.of(bid="b2"): business("Palo Alto")})


def test_example_2_14_2_is_effective():
    delta = thesis_instance("example_2_14_2_businesses")
    post = apply_idiff({"businesses": BUSINESSES_PRE}, delta)["businesses"]
    assert is_effective(delta, BUSINESSES_PRE, post)
    assert is_effective(delta, BUSINESSES_PRE)


@pytest.mark.parametrize("diffs, message", [
    ("{{ #(bid=b2) { type: insert, post: { city: 'X' } } }}",
     "$[0]: inserts #(bid=b2), but the pre-state already has a value with this provenance"),
    ("{{ #(bid=nope) { type: delete } }}", "$[0]: deletes #(bid=nope), but the pre-state has no value with this provenance"),
    ("{{ #(bid=nope) { type: update, post: 1 } }}",
     "$[0]: updates #(bid=nope), but the pre-state has no value with this provenance"),
    ("{{ #(bid=tnhf) { type: update, diff: { city: { type: update, pre: 'Oakland', post: 'Palo Alto' } } } }}",
     "$[0].diff.city.pre: 'Oakland' does not agree with the pre-state value 'San Francisco'"),
    ("{{ #(bid=tnhf) { type: delete, pre: { city: 'Oakland' } } }}",
     "$[0].pre: { city: 'Oakland' } does not agree with the pre-state value "
     "{ business_id: 'tnhf', city: 'San Francisco' }"),
    ("{{ #(bid=tnhf) { type: update, diff: { city: { type: update, post: 'A' } } },"
     "   #(bid=tnhf) { type: update, diff: { city: { type: update, post: 'B' } } } }}",
     "$[0].diff.city.post: 'A' is not the post-state value 'B'"),
    ("{{ #(bid=tnhf) { type: update, diff: { zip: { type: update, post: 1 } } } }}",
     "$[0].diff.zip: updates attribute 'zip', but the pre-state value lacks it"),
    ("{{ #(bid=tnhf) { type: update, diff: { city: { type: insert, post: 'A' } } } }}",
     "$[0].diff.city: inserts attribute 'city', but the pre-state value has it"),
    ("{{ #(bid=tnhf) { type: delete }, #(bid=tnhf) { type: insert, post: 1 } }}",
     "$[0]: deletes #(bid=tnhf), but the post-state still has a value with this provenance"),
])
def test_effectiveness_violations(diffs, message):
    found = effectiveness_violations(parse_idiff(diffs), BUSINESSES_PRE)
    assert message in [str(v) for v in found]
    with pytest.raises(DataError, match="not effective"):
        check_effective(parse_idiff(diffs), BUSINESSES_PRE)


def test_effectiveness_against_a_given_post_state():
    delta = parse_idiff("{{ #(bid=tnhf) { type: update, diff: { city: { type: update, post: 'Oakland' } } } }}")
    post = KeyedBag({Provenance.of(bid="tnhf"): business("Palo Alto"), Provenance.of(bid="b2"): business("Palo Alto")})
    assert [str(v) for v in effectiveness_violations(delta, BUSINESSES_PRE, post)] == [
        "$[0].diff.city.post: 'Oakland' is not the post-state value 'Palo Alto'"]
    gone = KeyedBag({Provenance.of(bid="b2"): business("Palo Alto")})
    assert is_effective(delta, BUSINESSES_PRE, gone)  # §2.2: only values still there must reflect the update


def test_reinsertion_pair_is_effective_only_when_read_as_a_replacement():
    pair = parse_idiff("{{ #(bid=b2) { type: delete }, #(bid=b2) { type: insert, post: 'new' } }}")
    assert not is_effective(pair, BUSINESSES_PRE)
    assert is_effective(pair, BUSINESSES_PRE, reinsertion=Reinsertion.DELETE_INSERT)


def test_effectiveness_of_a_named_diff_looks_at_its_bag():
    users = users_pre_state()
    assert is_effective(thesis_instance("example_2_9_1_delta_b"), users)
    assert not is_effective(thesis_instance("example_2_14_2_users"), users)  # eid=9kjb exists already


# ----------------------------------------------------------------------------- condensation


def k(i: int) -> Provenance:
    return Provenance.of(k=i)


@pytest.mark.parametrize("sequence, expected", [
    ([IDiff.insert({"a": 1}, k(1)), IDiff.update(k(1), diff=TupleDiff({"a": IDiff.update(post=2)}))],
     [IDiff.insert({"a": 2}, k(1))]),
    ([IDiff.insert({"a": 1}, k(1)), IDiff.delete(k(1))], []),
    ([IDiff.delete(k(1), pre={"a": 1}), IDiff.insert({"a": 5}, k(1))],
     [IDiff.update(k(1), pre={"a": 1}, post={"a": 5})]),
    ([IDiff.update(k(1), pre=1, post=2), IDiff.update(k(1), pre=2, post=3)], [IDiff.update(k(1), pre=1, post=3)]),
    ([IDiff.update(k(1), pre=1, post=2), IDiff.delete(k(1), pre=2)], [IDiff.delete(k(1), pre=1)]),
    ([IDiff.update(k(1), diff=TupleDiff({"a": IDiff.update(pre=0, post=1)})),
      IDiff.update(k(1), diff=TupleDiff({"b": IDiff.update(pre=5, post=6), "a": IDiff.update(pre=1, post=2)}))],
     [IDiff.update(k(1), diff=TupleDiff({"a": IDiff.update(pre=0, post=2), "b": IDiff.update(pre=5, post=6)}))]),
    ([IDiff.update(k(1), diff=TupleDiff({"c": IDiff.insert(1)})),
      IDiff.update(k(1), diff=TupleDiff({"c": IDiff.delete()}))],
     [IDiff.update(k(1), diff=TupleDiff({}))]),
    ([IDiff.insert(1, k(1)), IDiff.delete(k(2)), IDiff.update(k(1), post=3)],
     [IDiff.insert(3, k(1)), IDiff.delete(k(2))]),
])
def test_condense_folding_table(sequence, expected):
    assert list(condense(sequence)) == expected


def test_condense_keeps_delete_insert_when_asked():
    sequence = [IDiff.delete(k(1), pre="a"), IDiff.insert("b", k(1))]
    assert list(condense(sequence, reinsertion="delete+insert")) == sequence
    assert list(condense(sequence)) == [IDiff.update(k(1), pre="a", post="b")]


def test_condense_merges_nested_bag_diffs():
    first = parse_idiff("#(uid=u) { type: update, diff: { elite: { type: update, diff: {{"
                        " #(eid=e1) { type: insert, post: 2014 }, #(eid=e2) { type: delete } }} } } }")
    second = parse_idiff("#(uid=u) { type: update, diff: { elite: { type: update, diff: {{"
                         " #(eid=e1) { type: update, post: 2015 }, #(eid=e2) { type: insert, post: 1 } }} } } }")
    assert list(condense([first, second])) == [parse_idiff(
        "#(uid=u) { type: update, diff: { elite: { type: update, diff: {{"
        " #(eid=e1) { type: insert, post: 2015 }, #(eid=e2) { type: update, post: 1 } }} } } }")]


@pytest.mark.parametrize("sequence, message", [
    ([IDiff.insert(1, k(1)), IDiff.insert(2, k(1))], "$[1]: insert of #(k=1), but it was inserted before"),
    ([IDiff.delete(k(1)), IDiff.update(k(1), post=1)], "$[1]: update of #(k=1), but it was deleted before"),
    ([IDiff.update(k(1), post=1), IDiff.insert(1, k(1))], "$[1]: insert of #(k=1), but it was updated before"),
    ([IDiff.insert(1, k(1)), IDiff.delete(k(1)), IDiff.delete(k(1))], "$[2]: delete of #(k=1), but it was inserted "
                                                                        "and deleted before"),
    ([IDiff.delete(Provenance()), IDiff.insert(1, k(1))], "$[0]: provenance #() also matches #(k=1) of $[1]"),
    ([IDiff.insert({"tags": [1]}, k(1)),
      IDiff.update(k(1), diff=TupleDiff({"tags": IDiff.update(diff=BagDiff((IDiff.delete({"t": 1}),)))}))],
     "$[1]: cannot fold this update into the value before it: a bag diff cannot be applied to a bag whose "
     "elements carry no provenance"),
])
def test_condense_rejects_inconsistent_sequences(sequence, message):
    with pytest.raises(DataError) as e:
        condense(sequence)
    assert e.value.one_line().startswith(message)


# ----------------------------------------------------------------------------- property tests

KEYS = [Provenance.of(k=i) for i in range(4)]
TAGS = [Provenance.of(t=i) for i in range(3)]
small = st.integers(0, 2)
plain_values = st.fixed_dictionaries({"a": small, "b": small},
                                     optional={"c": small, "tags": st.lists(small, max_size=2)})
stored_values = st.fixed_dictionaries(
    {"a": small, "b": small},
    optional={"c": small, "tags": st.dictionaries(st.sampled_from(TAGS), small, max_size=3).map(KeyedBag)})
pre_states = st.dictionaries(st.sampled_from(KEYS), stored_values, max_size=4).map(KeyedBag)


def draw_modification(data, state: KeyedBag) -> IDiff:
    """One modification that is valid on ``state`` (a modification log never inserts an existing
    value, nor deletes or updates a missing one)."""
    prov = data.draw(st.sampled_from(KEYS))
    current = state.get(prov, ABSENT)
    if current is ABSENT:
        return IDiff.insert(data.draw(plain_values), prov)
    with_pre = data.draw(st.booleans())
    choice = data.draw(st.sampled_from(["delete", "replace", "attributes"]))
    if choice == "delete":
        part = {n: v for n, v in current.items() if n in ("a", "c")} if data.draw(st.booleans()) else thaw(current)
        return IDiff.delete(prov, pre=part if with_pre else ABSENT)
    if choice == "replace":
        return IDiff.update(prov, pre=thaw(current) if with_pre else ABSENT, post=data.draw(plain_values))
    changes: dict[str, IDiff] = {"a": IDiff.update(pre=current["a"] if with_pre else ABSENT, post=data.draw(small))}
    if data.draw(st.booleans()):
        changes["c"] = IDiff.delete() if "c" in current else IDiff.insert(data.draw(small))
    tags = current.get("tags")
    if isinstance(tags, KeyedBag) and data.draw(st.booleans()):
        tag = data.draw(st.sampled_from(TAGS))
        if tag not in tags:
            nested = IDiff.insert(data.draw(small), tag)
        elif data.draw(st.booleans()):
            nested = IDiff.delete(tag, pre=tags[tag])
        else:
            nested = IDiff.update(tag, pre=tags[tag] if with_pre else ABSENT, post=data.draw(small))
        changes["tags"] = IDiff.update(diff=BagDiff((nested,)))
    return IDiff.update(prov, diff=TupleDiff(changes))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), pre_states)
def test_condensed_idiffs_are_effective_and_reach_the_same_post_state(data, pre):
    state, sequence = pre, []
    for _ in range(data.draw(st.integers(0, 10))):
        modification = draw_modification(data, state)
        sequence.append(modification)
        state = apply_bag_diff(state, [modification])
    post = state

    condensed = condense(sequence)
    assert apply_bag_diff(pre, condensed) == post
    assert effectiveness_violations(condensed, pre, post) == ()
    assert effectiveness_violations(condensed, pre) == ()
    assert len({e.provenance for e in condensed}) == len(condensed)
    assert apply_bag_diff(pre, reversed(condensed.elements)) == post  # effective: any order

    kept = condense(sequence, reinsertion=Reinsertion.DELETE_INSERT)
    assert apply_bag_diff(pre, kept) == post
    assert effectiveness_violations(kept, pre, post, reinsertion=Reinsertion.DELETE_INSERT) == ()
    deletes_first = sorted(kept, key=lambda e: e.type is not DiffType.DELETE)
    assert apply_bag_diff(pre, deletes_first) == post


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
names = st.text(min_size=1, max_size=6)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(names, inner, max_size=3)),
                           max_leaves=8)
provenances = st.dictionaries(names, scalars, max_size=3).map(Provenance.of)


def idiffs(with_provenance: bool, depth: int = 2):
    prov = provenances if with_provenance else st.none()
    leaves = st.one_of(
        st.builds(lambda p, v: IDiff.insert(v, p), prov, json_values),
        st.builds(lambda p, v, has: IDiff.delete(p, pre=v if has else ABSENT), prov, json_values, st.booleans()),
        st.builds(lambda p, a, b, has: IDiff.update(p, pre=a if has else ABSENT, post=b),
                  prov, json_values, json_values, st.booleans()),
    )
    if depth == 0:
        return leaves
    bag = st.lists(idiffs(True, depth - 1), max_size=3).map(lambda es: BagDiff(tuple(es)))
    tup = st.dictionaries(names, idiffs(False, depth - 1), max_size=3).map(lambda d: TupleDiff(tuple(d.items())))
    nested = st.builds(lambda p, d: IDiff.update(p, diff=d), prov, st.one_of(bag, tup))
    return st.one_of(leaves, nested)


documents = st.one_of(
    idiffs(True),
    st.lists(idiffs(True), max_size=3).map(lambda es: BagDiff(tuple(es))),
    st.builds(NamedDiff, names, idiffs(False)),
)


@settings(max_examples=120, deadline=None)
@given(documents)
def test_any_idiff_round_trips_through_json_and_notation(document):
    data = idiff_to_json(document)
    validate_idiff_json(data)
    assert idiff_from_json(json.loads(json.dumps(data))) == document
    assert parse_idiff(format_idiff(document)) == document
