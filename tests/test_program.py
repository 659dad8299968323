"""The compiled program a view's ``define`` stores (:mod:`idivm.program`) and ``maintain``
executes: it reads back equal to what compilation gives, maintenance never parses, plans or
generates again, and a program of another format is compiled again from the view's text."""

from __future__ import annotations

import json

import pytest

from idivm import program as programs
from idivm.datasets import devices, sample_path, view_path, yelp
from idivm.exec import programs as stored_programs
from idivm.exec.programs import compile_program
from idivm.warehouse import Warehouse

VIEWS = {"devices_v": "devices", "devices_cost": "devices", "sf_reviews": "yelp", "sf_reviews_grouped": "yelp"}


@pytest.fixture(scope="module")
def samples(spark, tmp_path_factory) -> Warehouse:
    wh = Warehouse(tmp_path_factory.mktemp("program"), spark=spark)
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    for table, key in yelp.keys(yelp.SAMPLE).items():
        wh.create_table(table, key, sample_path("yelp", table))
    return wh


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_a_program_reads_back_equal_to_its_compilation(samples, view):
    text = view_path(view).read_text(encoding="utf-8")
    compiled = compile_program(samples.catalog, text, view, "id", strict=True)
    back = programs.from_json(json.loads(json.dumps(programs.to_json(compiled))))
    assert back == compiled
    assert back.script.render() == compiled.script.render() and back.prov.view_ids == compiled.prov.view_ids
    # a subplan several statements share (computed once by a run) is shared after reading back too
    assert _objects(back.script) == _objects(compiled.script)
    assert _objects(compiled.script)[1] > 0
    assert programs.from_json({**programs.to_json(compiled), "format": "0/old"}) is None


def _objects(value) -> tuple[int, int]:
    """(distinct objects, objects reached more than once) of the dataclasses in ``value``."""
    import dataclasses

    seen: dict[int, int] = {}

    def go(v):
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            seen[id(v)] = seen.get(id(v), 0) + 1
            if seen[id(v)] == 1:
                for f in dataclasses.fields(v):
                    if f.init and f.name != "span":
                        go(getattr(v, f.name))
        elif isinstance(v, (tuple, list, frozenset)):
            for x in v:
                go(x)
        elif isinstance(v, dict):
            for k, x in v.items():
                go(k)
                go(x)

    go(value)
    return len(seen), sum(1 for n in seen.values() if n > 1)


def test_a_program_names_only_classes_of_idivm():
    with pytest.raises(ValueError, match="outside idivm"):
        programs.from_json({"format": programs.FORMAT, "program": {"class": "os:system", "fields": {}}})


def _forbid_compiling(monkeypatch):
    from idivm.generator import caches

    def refuse(*_args, **_kwargs):
        raise AssertionError("maintain compiled a view again")

    monkeypatch.setattr(stored_programs, "plan_view", refuse)
    monkeypatch.setattr(caches, "generate_view", refuse)


def test_maintain_executes_the_stored_program_and_compiles_one_of_another_format_once(
        make_warehouse, tmp_path, monkeypatch):
    wh = make_warehouse()
    for table, key in devices.KEYS.items():
        wh.create_table(table, key, sample_path("devices", table))
    wh.define(view_path("devices_cost"), strategy="id")
    wh.define(view_path("devices_v"), strategy="tuple")
    wh.define(view_path("devices_v").read_text().replace("phone_parts", "phone_parts_rc"), strategy="recompute")

    def change(name: str, price: float) -> None:
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"pid": 2, "price": price}) + "\n")
        wh.ingest("parts", tmp_path / f"{name}.jsonl", format="rows")

    change("a", 999.5)
    with monkeypatch.context() as m:
        _forbid_compiling(m)
        results = wh.maintain()
    assert {r.name: r.strategy for r in results} == {"phone_cost": "id", "phone_parts": "tuple",
                                                      "phone_parts_rc": "recompute"}
    for r in results:
        assert r.version is not None and wh.verify(r.name).ok, r.summary()

    # the stored programs are of an older format now: compiled again once, and stored
    stored = wh.path / "views" / "phone_cost.program" / "program.json"
    monkeypatch.setattr(programs, "FORMAT", "2/next")
    change("b", 1.25)
    (r,) = wh.maintain("phone_cost")
    assert r.strategy == "id" and wh.verify("phone_cost").ok, r.summary()
    assert json.loads(stored.read_text())["format"] == "2/next"
    change("c", 2.5)
    with monkeypatch.context() as m:
        _forbid_compiling(m)
        (r,) = wh.maintain("phone_cost")
    assert r.strategy == "id" and wh.verify("phone_cost").ok, r.summary()
