"""i-diff signatures (thesis §2.12.2): S₁ of Example 2.12.1 and the signature of Example 2.12.4 in
the thesis' notation and in JSON, satisfaction (with i-diffs deeper than the signature,
§2.12.3), homogeneity (Δ₃ of Example 2.12.2 fails S₁), single-bag trees, inference.

The instances and signatures are transcribed in ``goldens/diffs/thesis/`` (see
``test_diffs_instances.py``; Example 2.12.4's ``$(cid)`` is the extraction's ``#(cid)``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from idivm.diffs import (
    BagSignature,
    DiffType,
    RootSignature,
    SignatureNode,
    TupleSignature,
    format_signature,
    homogeneity_violations,
    is_homogeneous,
    parse_idiff,
    parse_signature,
    satisfaction_violations,
    satisfies,
    signature_of,
    split_by_bag,
)
from idivm.diffs.model import (
    dumps_signature,
    loads_signature,
    signature_from_json,
    signature_schema,
    signature_to_json,
    validate_signature_json,
)
from idivm.errors import DataError, SqlppSyntaxError, UnsupportedError

GOLDENS = Path(__file__).parent / "goldens" / "diffs"
THESIS = GOLDENS / "thesis"


def thesis(name: str):
    path = THESIS / name
    if path.suffix == ".sig":
        return parse_signature(path.read_text(), str(path))
    return parse_idiff(path.read_text(), str(path))


def check_golden(name: str, text: str, update: bool) -> None:
    path = GOLDENS / name
    if update:
        path.write_text(text)
        return
    assert path.exists(), f"missing golden {path}; run pytest --update-goldens and review it"
    assert text == path.read_text(), f"{path} differs; run pytest --update-goldens and review the diff"


S1 = thesis("example_2_12_1_s1.sig")
DELTA_V = thesis("example_2_9_1_delta_v.idiff")
DELTA_2 = thesis("example_2_12_1_delta_2.idiff")
DELTA_3 = thesis("example_2_12_2_delta_3.idiff")


# ----------------------------------------------------------------------------- representation


def test_s1_is_the_tree_of_example_2_12_1():
    user_id = SignatureNode(DiffType.UPDATE, post=True)
    review = SignatureNode(DiffType.UPDATE, diff=TupleSignature({"user_id": user_id}))
    full_reviews = SignatureNode(DiffType.UPDATE, diff=BagSignature(("uid",), review))
    assert S1 == RootSignature((), SignatureNode(DiffType.UPDATE, diff=TupleSignature({"full_reviews": full_reviews})))


@pytest.mark.parametrize("name", ["example_2_12_1_s1", "example_2_12_4"])
def test_thesis_signature_parses_validates_prints_and_round_trips(name, update_goldens):
    signature = thesis(f"{name}.sig")
    data = signature_to_json(signature)
    validate_signature_json(data)
    printed = format_signature(signature)
    assert str(signature) == printed
    check_golden(f"{name}.sig.txt", printed + "\n", update_goldens)
    check_golden(f"{name}.sig.json", json.dumps(data, indent=2) + "\n", update_goldens)
    # notation → model → JSON → model → notation
    again = signature_from_json(json.loads(json.dumps(data)))
    assert again == signature
    assert format_signature(again) == printed
    assert parse_signature(printed) == signature
    assert loads_signature(dumps_signature(signature)) == signature


def test_shorthands_of_the_thesis_mean_updates():
    assert parse_signature("#() { user_id: { post } }") == parse_signature(
        "#() { type: update, diff: { user_id: { type: update, post } } }")
    prefixed = parse_signature("#() { type: update, diff: { #(uid) r: { type: update, diff: { type: delete } } } }")
    inline = parse_signature("#() { type: update, diff: { r: { type: update, diff: #(uid) { type: delete } } } }")
    assert prefixed == inline
    assert "#(uid) r: {" in format_signature(inline)


def test_named_root_signature():
    users = parse_signature("<users: #(uid) { type: update, diff: { fans: { type: update, pre, post } } }>")
    assert users.name == "users" and users.provenance == ("uid",)
    assert format_signature(users).startswith("<users: #(uid) {")
    assert signature_from_json(signature_to_json(users)) == users
    assert signature_to_json(users)["name"] == "users"


def test_nested_signatures_print_in_the_thesis_notation():
    full_reviews = S1.element.diff["full_reviews"]
    assert str(full_reviews.diff) == "#(uid) {\n  type: update,\n  diff: {\n    user_id: { type: update, post }\n  }\n}"
    assert str(S1.element.diff).startswith("{\n  #(uid) full_reviews: {")
    assert full_reviews.children() == (full_reviews.diff.element,)


def test_bag_of_bags_prints_with_the_inline_form():
    nested = RootSignature(("a",), SignatureNode(DiffType.UPDATE, diff=BagSignature(
        ("b",), SignatureNode(DiffType.INSERT, post=True))))
    assert "diff: #(b) { type: insert, post }" in format_signature(nested)
    assert parse_signature(format_signature(nested)) == nested


def test_signature_schema_ships_with_the_package():
    assert signature_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("data, message", [
    ({"provenance": [], "element": {"type": "upsert"}}, "$.element.type: 'upsert' is not one of"),
    ({"provenance": ["uid", "uid"], "element": {"type": "delete"}}, "$.provenance: ['uid', 'uid'] has non-unique"),
    ({"provenance": [], "element": {"type": "insert", "pre": True}}, "$.element.pre: an insert signature has no pre"),
    ({"provenance": [], "element": {"type": "delete", "post": True}}, "$.element.post: a delete signature has no post"),
    ({"provenance": [], "element": {"type": "update", "diff": {"attributes": {}}}},
     "$.element.diff.attributes: {} should be non-empty"),
    ({"provenance": [], "element": {"type": "update", "diff": {"element": {"type": "delete"}}}},
     "$.element.diff: 'provenance' is a required property"),
    ({"element": {"type": "delete"}}, "$: 'provenance' is a required property"),
    ({"provenance": [], "element": {"type": "update", "post": "yes"}}, "$.element.post: 'yes' is not of type 'boolean'"),
])
def test_schema_rejects_malformed_signatures_naming_the_path(data, message):
    with pytest.raises(DataError) as e:
        signature_from_json(data)
    assert e.value.one_line().startswith(message)


@pytest.mark.parametrize("text, error, message", [
    ("#() { type: update, fans: { post } }", DataError,
     "1:21: a signature lists either its parts (type, pre, post, diff) or, short for an update of a tuple, "
     "attributes; not both (found 'fans' next to 'type')"),
    ("#() { type: update, diff: { type: delete } }", DataError,
     "1:29: this diff describes a tuple, so it lists attributes, not 'type'"),
    ("#() { type: update, diff: { #(cid) categories: { type: update } } }", DataError,
     "1:29: #(cid) names the provenance keys of the elements of 'categories', but its signature has no diff"),
    ("#() { type: update, diff: { #(cid) c: { type: update, diff: #(x) { type: delete } } } }", DataError,
     "1:55: the provenance keys of the elements of 'c' are given twice"),
    ("#() { }", DataError, "1:5: an empty signature: give at least its type"),
    ("#() { type: insert, pre }", DataError, "1:7: an insert signature has neither pre nor a nested diff"),
    ("#() { type: update, type: delete }", DataError, "1:21: duplicate 'type' in a signature"),
    ("#(uid, uid) { type: delete }", DataError, "1:1: duplicate provenance key name"),
    ("{ type: delete }", SqlppSyntaxError, "1:1: unexpected '{'; expected one of '#', '<'"),
    ("#() { type: update, post: 1 }", SqlppSyntaxError, "1:25: unexpected ':'; expected one of ',', '}'"),
])
def test_signature_notation_errors(text, error, message):
    with pytest.raises(error) as e:
        parse_signature(text)
    assert e.value.one_line().startswith(message)


def test_signature_model_validates_on_construction():
    with pytest.raises(DataError, match="a delete signature has neither post nor a nested diff"):
        SignatureNode(DiffType.DELETE, post=True)
    with pytest.raises(DataError, match="a tuple signature names at least one attribute"):
        TupleSignature(())
    with pytest.raises(DataError, match="duplicate provenance key name"):
        BagSignature(("a", "a"), SignatureNode(DiffType.DELETE))
    with pytest.raises(DataError, match="not one string"):
        RootSignature("uid", SignatureNode(DiffType.DELETE))


# ----------------------------------------------------------------------------- satisfaction


def test_delta_v_satisfies_s1_though_its_elite_diff_is_deeper_than_s1():
    """Examples 2.12.1 and 2.12.3: S₁ knows nothing of elite years, Δ^V still satisfies it."""
    assert satisfaction_violations(DELTA_V, S1) == ()
    assert satisfies(DELTA_V, S1)
    assert satisfies(DELTA_V[0], S1)  # one element of the view's bag diff


def test_requiring_every_declared_attribute_is_stricter():
    assert [str(v) for v in satisfaction_violations(DELTA_V, S1, require_all_attributes=True)] == [
        "$[0].diff.full_reviews.diff[0].diff: lacks the i-diff of attribute 'user_id' the signature declares"]


def test_delta_2_does_not_satisfy_s1_because_its_type_differs():
    """Example 2.12.1: Δ₂^V deletes a review where S₁ declares updates."""
    assert [str(v) for v in satisfaction_violations(DELTA_2, S1)] == [
        "$[0].diff.full_reviews.diff[0].type: delete, but the signature requires update"]
    assert is_homogeneous(DELTA_2)


def test_delta_3_fails_s1_for_homogeneity():
    """Example 2.12.2: Δ₃^V mixes a delete and an update of full_reviews in one bag diff."""
    homogeneity = ("$[0].diff.full_reviews.diff: the bag diff is not homogeneous: element [0] is a delete, "
                   "element [1] a update (§2.12.2)")
    found = [str(v) for v in satisfaction_violations(DELTA_3, S1)]
    assert homogeneity in found
    assert not satisfies(DELTA_3, S1)
    assert not is_homogeneous(DELTA_3)
    assert not is_homogeneous(DELTA_3, S1)
    assert [str(v) for v in homogeneity_violations(DELTA_3)] == [homogeneity]
    assert is_homogeneous(DELTA_V) and is_homogeneous(DELTA_V, S1)


def test_homogeneity_is_not_required_below_the_signature():
    mixed_elite = parse_idiff("""{{ #() { type: update, diff: { full_reviews: { type: update, diff: {{
        #(uid=Ha3i) { type: update, diff: { elite: { type: update, diff: {{
            #(eid=a) { type: insert, post: 2014 }, #(eid=b) { type: delete } }} } } } }} } } } }}""")
    assert not is_homogeneous(mixed_elite)
    assert is_homogeneous(mixed_elite, S1)  # elite is deeper than S₁ (§2.12.3)
    assert satisfies(mixed_elite, S1)


def test_mixed_provenance_keys_are_not_homogeneous():
    mixed = parse_idiff("{{ #(uid=a) { type: delete }, #(rid=b) { type: delete } }}")
    assert [str(v) for v in homogeneity_violations(mixed)] == [
        "$: the bag diff is not homogeneous: element [0] has provenance keys (uid), element [1] (rid) (§2.12.2)"]


USERS = parse_signature("<users: #(uid) { type: update, diff: { fans: { type: update, post } } }>")
BUSINESSES_CITY = parse_signature("<businesses: #(bid) { type: update, diff: { city: { type: update, pre, post } } }>")


def test_base_table_instances_of_example_2_14_2_satisfy_their_signatures():
    """Example 2.14.2: the elite insert belongs to the update signature of users although
    elite is unknown to the view; the city update to the conditional signature of businesses."""
    assert satisfies(thesis("example_2_14_2_users.idiff"), USERS)
    assert satisfies(thesis("example_2_9_1_delta_b.idiff"), USERS)
    assert satisfies(thesis("example_2_14_2_businesses.idiff"), BUSINESSES_CITY)


@pytest.mark.parametrize("instance, signature, message", [
    ("<businesses: { type: update, diff: {{ #(bid=x) { type: update, diff: { city: { type: update, post: 'A' } } } }} }>",
     BUSINESSES_CITY, "$.idiff.diff[0].diff.city: lacks the pre-state the signature declares"),
    ("<users: { type: update, diff: {{ #(uid=x) { type: update, post: 1 } }} }>",
     BUSINESSES_CITY, "$.name: the i-diff is of 'users', the signature of 'businesses'"),
    ("<users: { type: update, diff: {{ #(uid=x) { type: update, post: 1 } }} }>",
     USERS, "$.idiff.diff[0]: lacks the nested diff the signature declares"),
    ("<users: { type: update, diff: {{ #(rid=x) { type: update, diff: { fans: { type: update, post: 1 } } } }} }>",
     USERS, "$.idiff.diff[0].provenance: lacks provenance key uid declared by the signature"),
    ("<users: { type: update, diff: {{ #(uid=x) { type: update, diff: {{ }} } }} }>",
     USERS, "$.idiff.diff[0].diff: is a bag diff, but the signature declares a tuple diff"),
    ("<users: { type: delete }>", USERS, "$.idiff.type: delete of the whole bag, but a signature tree describes i-diffs of its elements, inside an "
             "update of the bag"),
    ("{{ #() { type: update, diff: { full_reviews: { type: update, diff: { a: { type: update, post: 1 } } } } } }}",
     S1, "$[0].diff.full_reviews.diff: is a tuple diff, but the signature declares a bag diff"),
])
def test_satisfaction_violations_name_the_path(instance, signature, message):
    assert message in [str(v) for v in satisfaction_violations(parse_idiff(instance), signature)]


def test_node_signature_checks_one_idiff():
    node = SignatureNode(DiffType.UPDATE, pre=True, post=True)
    assert satisfies(parse_idiff("{ type: update, pre: 1, post: 2 }"), node)
    assert not satisfies(parse_idiff("{ type: update, post: 2 }"), node)


# ----------------------------------------------------------------------------- one bag per tree


def test_s1_is_about_the_single_bag_full_reviews():
    assert S1.is_single_bag and S1.target_bag() == ("full_reviews",)
    assert S1.bag_paths() == ((), ("full_reviews",))
    assert split_by_bag(S1) == (S1,)
    assert USERS.target_bag() == ()


def test_example_2_12_4_is_split_into_one_signature_per_bag():
    """Example 2.12.4: valid by definition, but idIVM generates one signature for categories
    and one for full_reviews instead."""
    both = thesis("example_2_12_4.sig")
    assert not both.is_single_bag
    with pytest.raises(UnsupportedError, match=r"several bags below the root \(categories, full_reviews\)"):
        both.target_bag()
    categories, full_reviews = split_by_bag(both)
    assert full_reviews == S1
    assert categories == parse_signature(
        "#() { type: update, diff: { #(cid) categories: { type: update, diff: { type: delete } } } }")
    assert all(s.is_single_bag for s in (categories, full_reviews))


def test_split_keeps_the_root_bags_own_attributes():
    mixed = parse_signature("#(bid) { type: update, diff: { name: { post }, #(rid) reviews: { type: update,"
                            " diff: { stars: { post }, #(eid) elite: { type: update, diff: { type: insert, post } } } } } }")
    assert not mixed.is_single_bag
    own, reviews, elite = split_by_bag(mixed)
    assert own == parse_signature("#(bid) { type: update, diff: { name: { post } } }")
    assert reviews == parse_signature("#(bid) { type: update, diff: { #(rid) reviews: { type: update,"
                                      " diff: { stars: { post } } } } }")
    assert elite.target_bag() == ("reviews", "elite")
    assert elite == parse_signature("#(bid) { type: update, diff: { #(rid) reviews: { type: update, diff: {"
                                    " #(eid) elite: { type: update, diff: { type: insert, post } } } } } }")
    assert mixed.bag_paths() == ((), ("reviews",), ("reviews", "elite"))


def test_bags_of_bags_are_entered_with_an_elements_step():
    nested = parse_signature("#(a) { type: update, diff: #(b) { type: update, diff: { x: { post } } } }")
    assert nested.bag_paths() == ((), ("[]",))
    assert nested.target_bag() == ("[]",)


# ----------------------------------------------------------------------------- inference


def test_signature_of_delta_v_reaches_the_elite_years(update_goldens):
    inferred = signature_of(DELTA_V)
    check_golden("example_2_9_1_delta_v.inferred.sig.txt", format_signature(inferred) + "\n", update_goldens)
    assert satisfies(DELTA_V, inferred, require_all_attributes=True)
    assert signature_of(thesis("example_2_14_2_businesses.idiff")) == BUSINESSES_CITY


def test_signature_of_a_heterogeneous_instance_is_an_error():
    with pytest.raises(DataError) as e:
        signature_of(DELTA_3)
    assert e.value.one_line() == ("$[0].diff.full_reviews.diff: the bag diff is not homogeneous: element [0] is a "
                                  "delete, element [1] a update (§2.12.2)")
    with pytest.raises(DataError, match=r"\$\[1\]: its signature differs from element \[0\]'s"):
        signature_of(parse_idiff("{{ #(k=1) { type: update, post: 1 }, #(k=2) { type: update, pre: 0, post: 1 } }}"))
