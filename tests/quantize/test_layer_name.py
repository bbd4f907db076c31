"""layer_name is total (issue 26 item 9): PP-OCR's recogniser left a binding whose provenance
list was empty, and the accuracy report crashed with IndexError."""

from __future__ import annotations

from vpuc.compiler.quantize.measurement.accuracy import layer_name


def test_a_binding_named_by_its_nodes():
    assert layer_name("lv1", {"lv1": ["Conv_0", "Relu_1"]}) == ("Relu_1", ("Conv_0", "Relu_1"))


def test_an_empty_provenance_list_is_no_provenance():
    assert layer_name("lv1", {"lv1": []}) == ("lv1", ())


def test_following_sources_to_an_empty_list_names_the_var():
    provenance = {"lv2": [], "x": []}
    assert layer_name("lv2", provenance, {"lv2": "x"}) == ("x (relaid out)", ())


def test_following_sources_past_an_empty_list_to_a_node():
    provenance = {"lv2": [], "lv1": ["Conv_0"]}
    assert layer_name("lv2", provenance, {"lv2": "lv1"}) == ("Conv_0 (relaid out)", ("Conv_0",))
